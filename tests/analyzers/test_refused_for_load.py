"""Requests a server turns away for load before any engine span is written (``llmtrace serve
--limit-concurrency``: HTTP 503 from the connection limit) are named at arrival.admission from the client's
passes alone; the same burst against a server without the limit is not. The real server, the real OpenAI SDK
through ``instrument()``, ``llmtrace diagnose`` through the CLI."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from testkit import RunningServer, diagnose_json, start_server, stop_server

import llmtrace
from llmtrace.adapters import instrument


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("limited"), "--limit-concurrency", "2")
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("roomy"))
    yield srv
    stop_server(srv)


def _burst(srv: RunningServer, db: Path, retries: int) -> None:
    llmtrace.init(db=db, service_name="ticket-desk", capture="hashes", strict=True)
    try:
        client = instrument(openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=retries))

        def one(i: int) -> None:
            try:
                client.chat.completions.create(model="tiny", max_tokens=16, temperature=0, messages=[
                    {"role": "system", "content": "You triage support tickets for a bike shop."},
                    {"role": "user", "content": f"Ticket {i}: my chain slips."}])
            except openai.APIStatusError:
                pass  # the refusals are the point

        threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        llmtrace.shutdown()


@pytest.mark.parametrize("retries", [0, 2], ids=["no-retries", "sdk-retries"])
def test_requests_refused_at_the_door_are_named(limited: RunningServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str], retries: int) -> None:
    db = tmp_path / "app.duckdb"
    _burst(limited, db, retries)
    found = diagnose_json(db, capsys)
    seen = [(f["severity"], f["stage"], f["title"]) for f in found]
    assert found and found[0]["stage"] == "arrival.admission", seen
    assert "refused for load (HTTP 503)" in found[0]["title"] and found[0]["severity"] != "info", seen


def test_the_same_burst_on_a_roomy_server_is_not(roomy: RunningServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "app.duckdb"
    _burst(roomy, db, 0)
    found = diagnose_json(db, capsys)
    assert not [f for f in found if f["stage"] == "arrival.admission"], found
