"""A call ``llmtrace serve`` refuses is a failure ``diagnose`` names, from either side's store: the app's (the OpenAI
SDK through ``instrument()``) and the server's own (the bundled backend's pass and its failing stage span). Before
this, a 404 for an unknown model left ``diagnose`` saying "No findings"."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_store import rows, wait_for
from testkit import RunningServer, diagnose_json

import llmtrace
from llmtrace.adapters import instrument

MSGS = [{"role": "user", "content": "Where is my parcel?"}]
UNKNOWN = "gpt-4o-mini-unknown-here"


def _failures(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in found:
        for ev in f["evidence"]:
            if "failed_calls" in f["symptoms"] and ev["label"] == "error kind":
                out[str(ev["value"])] = f
    return out


def _message(f: dict[str, Any]) -> str:
    return " | ".join(str(ev["value"]) for ev in f["evidence"] if ev["label"] == "message")


def test_unknown_model_and_long_prompt_are_named_from_both_sides(tiny_server: RunningServer, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "app.duckdb"
    # the server is shared by this worker's other tests, which send their own unknown models: its store is read
    # from this test's start on, as a user reads the last hour
    start = dt.datetime.now(dt.timezone.utc).isoformat()
    llmtrace.init(db=db, service_name="parcel-desk", capture="hashes", strict=True)
    try:
        client = instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="sk-unused", max_retries=0))
        client.chat.completions.create(model="tiny", max_tokens=4, messages=MSGS)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=UNKNOWN, messages=MSGS)
        with pytest.raises(openai.BadRequestError):  # far past the server's context window
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "parcel " * 40_000}])
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=UNKNOWN, messages=MSGS)
        failed = rows(db, "SELECT trace_id, model FROM requests WHERE status = 'error' ORDER BY start_ns")
    finally:
        llmtrace.shutdown()
    assert [r["model"] for r in failed] == [UNKNOWN, "tiny", UNKNOWN]

    kinds = _failures(diagnose_json(db, capsys))
    assert kinds["model_not_found"]["stage"] == "arrival.model_routing"
    assert f"The model '{UNKNOWN}' does not exist" in _message(kinds["model_not_found"])
    assert "404" in kinds["model_not_found"]["title"] and kinds["model_not_found"]["severity"] == "critical"  # 2 of 4
    assert kinds["context_too_long"]["stage"] == "intake.tokenization"
    assert "maximum context length" in _message(kinds["context_too_long"])

    # the server's own store: its pass span ended in error and its routing stage span says where
    found = wait_for(tiny_server.db_path, "SELECT span_id FROM spans WHERE trace_id = ? AND stage = 'arrival.model_routing' "
                                          "AND status = 'error'", [failed[0]["trace_id"]])
    assert found, "the server did not record its routing failure"
    server_kinds = _failures(diagnose_json(tiny_server.db_path, capsys, "--since", start))
    assert server_kinds["model_not_found"]["stage"] == "arrival.model_routing"
    assert UNKNOWN in _message(server_kinds["model_not_found"])
