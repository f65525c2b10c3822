"""A compaction with no session named whose summary is folded into the system prompt (the instructions
kept, the summary appended), the opening user turn kept: every chained digest of the rewritten request
differs from the conversation's (the system prompt leads the chain), so the conversation is found by its
opening and the grown system prompt. Real ``llmtrace serve`` on loopback, the official OpenAI and Anthropic
SDKs wrapped by ``instrument()``, the store as written, ``llmtrace diagnose``. The twin's summary keeps
every id: a rewrite, no alarm. A conversation that merely shares its opening under another system prompt
is not the same conversation."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import duckdb
import openai
import pytest
from testkit import RunningServer, start_server, stop_server

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.cli import main

BRIEF = ("You are the booking assistant of Northgate Coaches. Quote fares only from the fare table, offer the "
         "next departure first, and never confirm a seat before payment. Luggage over twenty kilos costs extra. ")
TURNS = [("My order NG-88120 for the Edinburgh tour has the wrong date.", "I can look into that."),
         ("It was booked by Priya Raman, priya.raman@example.org.", "Thanks, noted."),
         ("We paid £214.50 by card ending 7731.", "Understood."), ("The tour should be on the 19th.", "Noted.")]
Msg = dict[str, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("serve"))
    yield srv
    stop_server(srv)


def _send(server: RunningServer, sdk: str, system: str, msgs: list[Msg]) -> None:
    if sdk == "anthropic":
        client = instrument(anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0))
        client.messages.create(model="tiny", max_tokens=2, system=system, messages=msgs)
    else:
        client = instrument(openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0))
        client.chat.completions.create(model="tiny", max_tokens=2, messages=[{"role": "system", "content": system},
                                                                             *msgs])


def _chat(server: RunningServer, sdk: str, keeps: bool, fold_system: str = BRIEF) -> None:
    first: Msg = {"role": "user", "content": "Hello, I need help with a booking."}
    hist: list[Msg] = [first, {"role": "assistant", "content": "Of course, tell me more."}]
    for q, a in TURNS:
        hist.append({"role": "user", "content": q})
        _send(server, sdk, BRIEF, hist)
        hist.append({"role": "assistant", "content": a})
    summary = ("Summary: order NG-88120, Edinburgh tour, booked by Priya Raman (priya.raman@example.org), paid "
               "£214.50 by card ending 7731, should be on the 19th." if keeps
               else "Summary: a customer wants the date of a tour booking changed; payment was made.")
    _send(server, sdk, fold_system + "\n" + summary,
          [first, {"role": "assistant", "content": "Of course."}, {"role": "user", "content": "My order number?"}])


def _run(tmp: Path, server: RunningServer, sdk: str, keeps: bool, fold_system: str = BRIEF) -> tuple[list[Any], list[Any]]:
    db = tmp / "app.duckdb"
    llmtrace.init(db=db, service_name="coach-desk", strict=True)
    try:
        _chat(server, sdk, keeps, fold_system)
    finally:
        llmtrace.shutdown()
    con = duckdb.connect(str(db), read_only=True)
    lost = [json.loads(r[0]) for r in con.execute(
        """SELECT json_extract(attributes, '$."llmtrace.compaction.facts_lost"')
           FROM spans WHERE stage = 'loop.compaction'""").fetchall()]
    con.close()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return lost, json.loads(buf.getvalue())["findings"]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_summary_folded_into_the_system_prompt_that_drops_the_ids_is_found(
        tmp_path: Path, server: RunningServer, sdk: str) -> None:
    lost, findings = _run(tmp_path, server, sdk, keeps=False)
    assert len(lost) == 1 and len(lost[0]) >= 3  # the order id, the name, the e-mail, the amount...
    assert findings and findings[0]["stage"] == "loop.compaction" and findings[0]["severity"] != "info"


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_summary_folded_into_the_system_prompt_that_keeps_them_raises_no_alarm(
        tmp_path: Path, server: RunningServer, sdk: str) -> None:
    lost, findings = _run(tmp_path, server, sdk, keeps=True)
    assert lost == [[]]
    assert not [f for f in findings if f["stage"] == "loop.compaction" and f["severity"] != "info"]


def test_the_same_opening_under_another_system_prompt_is_another_conversation(
        tmp_path: Path, server: RunningServer) -> None:
    """The last request's system prompt does not contain the conversation's: not a fold, no compaction."""
    lost, findings = _run(tmp_path, server, "openai", keeps=False, fold_system="You answer for Larkspur Freight.")
    assert lost == []
    assert not [f for f in findings if f["stage"] == "loop.compaction"]


@pytest.mark.parametrize("keeps", [False, True], ids=["drops", "keeps"])
def test_a_summary_sent_as_a_developer_message_is_a_compaction(tmp_path: Path, server: RunningServer,
                                                               keeps: bool) -> None:
    """[system, opening turn, developer: summary, question]: no answer in the history, yet more than one
    exchange (the app's own note after the first turn), so the conversation is looked up by its opening."""
    db = tmp_path / "app.duckdb"
    llmtrace.init(db=db, service_name="coach-desk", strict=True)
    try:
        first: Msg = {"role": "user", "content": "Hello, I need help with a booking."}
        hist: list[Msg] = [first, {"role": "assistant", "content": "Of course, tell me more."}]
        for q, a in TURNS:
            hist.append({"role": "user", "content": q})
            _send(server, "openai", BRIEF, hist)
            hist.append({"role": "assistant", "content": a})
        summary = ("Conversation so far: order NG-88120, Edinburgh tour, booked by Priya Raman "
                   "(priya.raman@example.org), paid £214.50 by card ending 7731, should be on the 19th." if keeps
                   else "Conversation so far: a customer wants the date of a tour booking changed; payment was made.")
        _send(server, "openai", BRIEF, [first, {"role": "developer", "content": summary},
                                        {"role": "user", "content": "Which card did I pay with?"}])
    finally:
        llmtrace.shutdown()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    loud = [f for f in json.loads(buf.getvalue())["findings"]
            if f["stage"] == "loop.compaction" and f["severity"] != "info"]
    assert bool(loud) is not keeps, loud
