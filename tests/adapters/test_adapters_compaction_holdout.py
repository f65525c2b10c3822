"""Two wire compactions the middleware mis-read (hold-out probe, round s6), through the public face: the
real OpenAI SDK wrapped by ``instrument()`` against the loopback fake provider, ``llmtrace diagnose``.

1. Inside ``llmtrace.session`` the app replaces the history by [system + summary, question]: two messages
   and no assistant turn. The facts of such a request must still be read (its conversation was found), or
   every earlier fact counts as lost even when the summary kept them all.
2. With no session named, the summary comes back as a user turn after the kept opening under a long system
   prompt: the shrink test must not count the unchanged system prompt and opening, or a real compaction
   that dropped the barcode, the book and the branch reads as "not shrunk".
Each case has a clean twin (the summary keeps every fact) and a planted one (the summary drops them).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, Script, fake_provider
from adapters_store import rows

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.cli import main

SYS = ("You are Pip, the help agent of Quillmark Libraries. Check the member card before renewing a loan, "
       "never waive a fine above ten pounds, tell members about the Saturday story hour when children are "
       "mentioned, and keep each reply to two short sentences. ") * 3
Msg = dict[str, Any]


@pytest.fixture()
def client() -> Iterator[Any]:
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        yield instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))


def _ask(client: Any, messages: list[Msg]) -> None:
    client.chat.completions.create(model="gpt-4o-mini", max_tokens=1, messages=messages)


def _summary_in_system(client: Any, keeps: bool) -> None:
    with llmtrace.session("member-0"):
        hist: list[Msg] = [{"role": "system", "content": SYS}]
        for q, a in [("My card is QL-5410 and I borrowed Dune.", "Noted."),
                     ("It is due on the 12th, reservation R-878.", "Thanks."),
                     ("I also owe a fine.", "I see."), ("Can you help?", "Sure.")]:
            hist.append({"role": "user", "content": q})
            _ask(client, hist)
            hist.append({"role": "assistant", "content": a})
        summary = ("Summary: member card QL-5410, borrowed Dune, due the 12th, reservation R-878, owes a fine."
                   if keeps else "Summary: member borrowed a book and owes a fine.")
        _ask(client, [{"role": "system", "content": SYS + "\n" + summary},
                      {"role": "user", "content": "What was my reservation number?"}])


def _summary_as_user_turn(client: Any, keeps: bool) -> None:
    first: Msg = {"role": "user", "content": "Opening a complaint about loan L-330."}
    opened: Msg = {"role": "assistant", "content": "Complaint opened."}
    hist: list[Msg] = [{"role": "system", "content": SYS}, first, opened]
    for q, a in [("The book was Emma by Jane Austen, barcode B-77120.", "Noted."), ("Branch Northgate, desk 4.", "Thanks."),
                 ("The cover was torn.", "I see."), ("I have a photo.", "Received.")]:
        hist.append({"role": "user", "content": q})
        _ask(client, hist)
        hist.append({"role": "assistant", "content": a})
    summary = ("Earlier: loan L-330, Emma by Jane Austen, barcode B-77120, Northgate desk 4, torn cover, photo received."
               if keeps else "Earlier: a complaint about a damaged book, photo received.")
    _ask(client, [{"role": "system", "content": SYS}, first, opened, {"role": "user", "content": summary},
                  {"role": "assistant", "content": "Thanks."}, {"role": "user", "content": "Which barcode was it?"}])


def _compaction(db: Path) -> dict[str, Any]:
    llmtrace.force_flush()
    found = [r["attributes"] for r in rows(db, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
    assert len(found) == 1  # the one rewrite, read off the wire
    assert found[0]["llmtrace.compaction.history_rewritten"] is True
    return found[0]


def _alarms(db: Path) -> list[dict[str, Any]]:
    """``llmtrace diagnose`` findings on compaction above info."""
    llmtrace.force_flush()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    findings = json.loads(buf.getvalue())["findings"]
    return [f for f in findings if f["stage"] == "loop.compaction" and f["severity"] != "info"]


@pytest.mark.parametrize("app", [_summary_in_system, _summary_as_user_turn])
def test_a_summary_that_keeps_every_fact_raises_no_compaction_alarm(client: Any, traced: Path, app: Any) -> None:
    app(client, keeps=True)
    c = _compaction(traced)
    assert c["llmtrace.compaction.facts_lost"] == [] and c["llmtrace.compaction.facts_lost_count"] == 0
    assert _alarms(traced) == []


@pytest.mark.parametrize("app", [_summary_in_system, _summary_as_user_turn])
def test_a_summary_that_drops_the_ids_is_found(client: Any, traced: Path, app: Any) -> None:
    app(client, keeps=False)
    c = _compaction(traced)
    # the card / loan id, the reservation or barcode, the book and the day or branch: several facts, yet only
    # those the conversation's earlier turns named (not every fact of the request, as an unread one gave)
    assert 3 <= c["llmtrace.compaction.facts_lost_count"] == len(c["llmtrace.compaction.facts_lost"]) <= 8
    assert all("#" in f for f in c["llmtrace.compaction.facts_lost"])  # kinds and keyed hashes, not the ids
    alarms = _alarms(traced)
    assert alarms and alarms[0]["stage"] == "loop.compaction"


def test_one_shot_questions_in_a_session_are_read_and_lose_nothing(client: Any, traced: Path) -> None:
    """The guard on the first fix: short requests of a known session are now read, and a session of one-shot
    questions (each [system, question], each naming other things) replaces one turn a call, no compaction."""
    with llmtrace.session("kiosk-3"):
        for q in ("Is Northgate open on Sunday?", "Where is desk 4 at Eastfield?", "Does Harbourside lend DVDs?"):
            _ask(client, [{"role": "system", "content": SYS}, {"role": "user", "content": q}])
    llmtrace.force_flush()
    comp = [r["attributes"] for r in rows(traced, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
    assert all(c["llmtrace.compaction.facts_lost"] == [] for c in comp)
    assert _alarms(traced) == []
