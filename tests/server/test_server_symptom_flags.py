"""Serve flags that make symptom-table causes reproducible through the public faces: streaming moderation
that lags the stream (``--moderation-words``, ``--moderation-every-tokens``, the request's ``moderation``
field), a detokenizer without byte hold-back (``--detokenizer-holdback off``, the request's
``detokenizer_holdback`` field) and a stop-string window shorter than the stop string (``--stop-holdback``). Real server (tiny model), official OpenAI SDK, ``diagnose --json``.

The tiny model's free text is a run of newlines, so the tests ask for structured output whose only allowed
value carries the moderated word or the non-Latin text: the constraint makes the model say it.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from server_testkit import wait_rows
from testkit import RunningServer, start_server, stop_server

from llmtrace.cli import main


def _schema(value: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"note": {"type": "string", "enum": [value]}},
        "required": ["note"], "additionalProperties": False}}}


REFUND = _schema("The depot confirmed the damage, so a full refund goes out on Friday")
KANJI = _schema("荷物は倉庫に届きました 📦")
MARKED = _schema("Pallet 7 is at bay four <<END>> internal: driver late again")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("symptom-flags"), "--moderation-words", "refund,solicitor",
                     "--moderation-every-tokens", "5", "--detokenizer-holdback", "off", "--stop-holdback", "1")
    try:
        yield s
    finally:
        stop_server(s)


def _stream(server: RunningServer, schema: dict[str, Any], **extra: Any) -> tuple[str, list[str], str | None]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "Status?"}], max_tokens=64, temperature=0,
        response_format=schema, stream=True, extra_body=extra)  # type: ignore[call-overload]
    pieces: list[str] = []
    finish = None
    for chunk in raw.parse():
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    return raw.headers["x-llmtrace-trace-id"], pieces, finish


def _stage(server: RunningServer, trace_id: str, stage: str) -> dict[str, Any]:
    rows = wait_rows(server.db_path, "SELECT attributes FROM stages WHERE trace_id = ? AND stage = ?", [trace_id, stage])
    return dict(json.loads(rows[0][0]))


def _findings(server: RunningServer) -> list[dict[str, Any]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(server.db_path), "--json"]) == 0
    return list(json.loads(buf.getvalue())["findings"])


def test_moderation_cuts_the_stream_after_its_text_was_shown(server: RunningServer) -> None:
    tid, pieces, finish = _stream(server, REFUND, detokenizer_holdback=True)
    shown = "".join(pieces)
    assert finish == "content_filter" and "refund" in shown and "Friday" not in shown  # cut, after the word
    mod = _stage(server, tid, "safety.moderation")
    assert mod["llmtrace.moderation.aborted"] is True and mod["llmtrace.moderation.retracted_chars"] == len(shown)
    assert 1 <= mod["llmtrace.moderation.lag_tokens"] <= 5 and mod["llmtrace.moderation.checks"] >= 1
    # the request's field turns it off; its own word list turns another one on
    _, pieces, finish = _stream(server, REFUND, moderation=False, detokenizer_holdback=True)
    assert finish == "stop" and "Friday" in "".join(pieces)
    _, pieces, finish = _stream(server, REFUND, moderation={"words": ["depot"], "every_tokens": 2},
                                detokenizer_holdback=True)
    assert finish == "content_filter" and "refund" not in "".join(pieces)
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="moderation"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                       extra_body={"moderation": {"words": "refund"}})


def test_without_hold_back_split_characters_reach_the_client_as_replacement_characters(
    server: RunningServer,
) -> None:
    tid, pieces, _ = _stream(server, KANJI, moderation=False)
    assert "\ufffd" in "".join(pieces) and "荷物" not in "".join(pieces)
    detok = _stage(server, tid, "gen.detokenization")
    assert detok["llmtrace.detok.replacement_chars"] > 0 and detok["llmtrace.detok.held_back_max"] == 0
    _, pieces, _ = _stream(server, KANJI, moderation=False, detokenizer_holdback=True)
    assert "".join(pieces) == '{"note": "荷物は倉庫に届きました 📦"}'
    stages = [f["stage"] for f in _findings(server) if f["severity"] != "info"]
    assert "gen.detokenization" in stages and "safety.moderation" in stages


def test_a_short_stop_window_streams_the_start_of_the_stop_string(server: RunningServer) -> None:
    tid, pieces, finish = _stream(server, MARKED, moderation=False, detokenizer_holdback=True, stop=["<<END>>"])
    shown = "".join(pieces)
    assert finish == "stop" and "internal" not in shown and "four <" in shown  # the start of "<<END>>" shown
    detok = _stage(server, tid, "gen.detokenization")
    assert detok["llmtrace.detok.stop_leaked_chars"] >= 1 and detok["llmtrace.detok.stop_holdback_chars"] <= 1
    found = [f for f in _findings(server) if f["stage"] == "gen.detokenization" and "stop string" in f["title"]]
    assert found and found[0]["severity"] == "warning"


def test_a_full_stop_window_is_not_blamed_when_one_token_completes_the_stop_string(
    tiny_server: RunningServer,
) -> None:
    """The default window holds the whole stop string back; the longest partial match seen can still be short
    (one token brings several of its characters), which is no leak."""
    schema = _schema("Gate B logged driver 4 [[internal]] review pending")
    tid, pieces, finish = _stream(tiny_server, schema, stop=["[[internal]]"])
    assert finish == "stop" and "".join(pieces).endswith("driver 4 ")  # nothing of the stop string shown
    detok = _stage(tiny_server, tid, "gen.detokenization")
    assert detok["llmtrace.detok.stop_leaked_chars"] == 0
    assert detok["llmtrace.detok.stop_holdback_chars"] < len("[[internal]]") - 1  # the old rule's false alarm
    assert not [f for f in _findings(tiny_server) if "stop string" in f["title"]]
