"""An app that sends only the last few messages of a conversation (a sliding window, no summary): the turns
it drops take their names and numbers with them, and a long session "forgets" the member number it was
given at the start. Seen on the wire, with no session named and with one: each request opens with the last
turns of the one before, in order, then the new ones (hold-out probe, session 15: missed before, since every
chained digest of the history changes once its first message is gone).

Real OpenAI SDK wrapped by ``instrument()`` against the loopback fake provider; ``llmtrace diagnose``.
The clean twins send the whole history, or drop only turns whose facts are said again later.
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

SYS = ("You are the reference desk of the Ashgrove library. Renew loans when no hold blocks them, book study "
       "rooms for up to two hours, and never read out another member's loans. Two sentences at most. ")
TURNS = [("My membership number is AM-48210 and I'm Priya Raman.", "Thanks Priya, found you."),
         ("I borrowed 'Tidewater', copy barcode 3900177.", "Yes, that loan is on file."),
         ("The cover was already torn when I got it.", "Noted, I've added a remark."),
         ("Can I still renew it?", "One renewal is left."), ("And the fine so far?", "Nothing yet."),
         ("Is the branch open late on Thursday?", "Until eight."),
         ("What was my membership number again?", "Let me check.")]
Msg = dict[str, Any]


@pytest.fixture()
def client() -> Iterator[Any]:
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        yield instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))


def _chat(client: Any, keep: int | None, session: str | None, turns: list[tuple[str, str]] = TURNS) -> None:
    """One conversation; ``keep``: the app sends its last ``keep`` messages only (None: all of them)."""
    history: list[Msg] = []
    with llmtrace.session(session) if session else contextlib.nullcontext():
        for q, a in turns:
            history.append({"role": "user", "content": q})
            sent = history if keep is None else history[-keep:]
            client.chat.completions.create(model="gpt-4o-mini", max_tokens=1,
                                           messages=[{"role": "system", "content": SYS}, *sent])
            history.append({"role": "assistant", "content": a})


def _diagnose(db: Path) -> list[dict[str, Any]]:
    llmtrace.force_flush()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return json.loads(buf.getvalue())["findings"]


@pytest.mark.parametrize("session", [None, "member-7"], ids=["inferred", "named-session"])
def test_a_window_that_drops_the_member_number_is_found(client: Any, traced: Path, session: str | None) -> None:
    _chat(client, keep=4, session=session)
    found = _diagnose(traced)
    assert found and found[0]["stage"] == "loop.compaction", [(f["stage"], f["title"]) for f in found]
    assert found[0]["title"].startswith("Dropping the oldest turns lost"), found[0]["title"]
    llmtrace.force_flush()
    comp = [r["attributes"] for r in rows(traced, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
    assert comp and all(c["llmtrace.compaction.method"] == "window" for c in comp)
    lost = {f for c in comp for f in c["llmtrace.compaction.facts_lost"]}
    assert any(f.startswith("id#") for f in lost)  # AM-48210, as a kind and a keyed hash


@pytest.mark.parametrize("session", [None, "member-8"], ids=["inferred", "named-session"])
def test_the_whole_history_raises_nothing(client: Any, traced: Path, session: str | None) -> None:
    _chat(client, keep=None, session=session)
    assert [f for f in _diagnose(traced) if f["stage"] == "loop.compaction"] == []


def test_a_window_over_small_talk_loses_nothing(client: Any, traced: Path) -> None:
    """The dropped turns named nothing (no name, id or number; a day of the week would count): a window, but no
    fact lost."""
    talk = [("Hello there.", "Hello, how can I help?"), ("Lovely weather today.", "It is."),
            ("I have a question.", "Go ahead."), ("Do you open early?", "Quite early."),
            ("And late?", "Fairly late."), ("Thanks a lot.", "You are welcome.")]
    _chat(client, keep=4, session=None, turns=talk)
    assert [f for f in _diagnose(traced) if f["stage"] == "loop.compaction" and f["severity"] != "info"] == []
