"""Retrieved-passage shape read off the wire, each text read once: the tools the app defines are not
pasted passages (their descriptions may quote tagged examples), a cue's passages are split once, and the
turns a conversation sends again with every request are not read again (for passages nor for
instructions). Real OpenAI SDK, instrumented, against the loopback fake provider."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, Script, fake_provider
from adapters_store import rows

from llmtrace.adapters import instrument
from llmtrace.tracer.reading import evidence_shape, untrusted_text

PASSAGES = ["Wharf 9 takes refrigerated containers only between six and ten in the morning on weekdays.",
            "Consignments held at customs for more than five days are charged a storage fee per pallet.",
            "The northern yard gate closes at noon on Saturdays; drivers arriving later are turned away."]
# A search tool whose description shows the model what its results look like: tagged passages.
SEARCH = {"type": "function", "function": {
    "name": "search_docs", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "description": "Searches the yard handbook. Results come back as " + " ".join(
        f"<doc>{p}</doc>" for p in PASSAGES[:2]) + " and so on."}}


@pytest.fixture()
def client() -> Iterator[Any]:
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        yield instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))


def _shapes(db: Path) -> list[dict[str, Any]]:
    return [r["attributes"] for r in rows(db, "SELECT attributes FROM spans WHERE stage = 'intake.evidence_formatting'"
                                                " ORDER BY start_ns")]


def test_tool_definitions_are_not_read_as_pasted_passages(traced: Path, client: Any) -> None:
    client.chat.completions.create(model="gpt-4o-mini", max_tokens=1, tools=[SEARCH],
                                   messages=[{"role": "user", "content": "When does the north gate close?"}])
    assert _shapes(traced) == []
    # The same passages pasted into the user's turn are read (the tool is still there).
    body = "Use the passages below.\n\n" + "\n\n".join(PASSAGES) + "\n\nWhen does the north gate close?"
    client.chat.completions.create(model="gpt-4o-mini", max_tokens=1, tools=[SEARCH],
                                   messages=[{"role": "user", "content": body}])
    (shape,) = _shapes(traced)
    assert (shape["llmtrace.evidence.chunks_in"], shape["llmtrace.evidence.id_scheme"]) == (3, "none")


def test_a_cues_passages_are_split_once(traced: Path, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real: Callable[[str], list[str]] = evidence_shape._paragraphs

    def spy(block: str) -> list[str]:
        calls.append(len(block))
        return real(block)

    monkeypatch.setattr(evidence_shape, "_paragraphs", spy)
    body = (f"Context for case {uuid.uuid4().hex}:\n\n"  # a text no other test sent (shapes are remembered)
            + "\n\n".join(f"[{i}] {p}" for i, p in enumerate(PASSAGES)) + "\n\nWhich gate closes?")
    client.chat.completions.create(model="gpt-4o-mini", max_tokens=1, messages=[{"role": "user", "content": body}])
    (shape,) = _shapes(traced)
    assert (shape["llmtrace.evidence.chunks_in"], shape["llmtrace.evidence.delimiter"]) == (3, "label")
    assert len(calls) == 1  # one cue, one block: split once


def test_a_growing_conversation_reads_only_its_new_turns(
    traced: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    scanned: list[int] = []
    real_shape, real_marks = evidence_shape._shape_one, untrusted_text._count_marks

    def shape_spy(text: str) -> evidence_shape.EvidenceShape | None:
        read.append(text)
        return real_shape(text)

    def marks_spy(text: str) -> int:
        scanned.append(len(text))
        return real_marks(text)

    monkeypatch.setattr(evidence_shape, "_shape_one", shape_spy)
    monkeypatch.setattr(untrusted_text, "_count_marks", marks_spy)
    run = uuid.uuid4().hex  # texts no other test sent
    history: list[dict[str, str]] = [{"role": "system", "content": "You answer for the yard."}]
    per_call: list[tuple[int, int]] = []
    for i in range(4):
        body = f"Context ({run}, question {i}):\n\n" + "\n\n".join(PASSAGES) + f"\n\nWhat about wharf {i}?"
        history.append({"role": "user", "content": body})
        before = (len(read), len(scanned))
        client.chat.completions.create(model="gpt-4o-mini", max_tokens=1, messages=history)
        per_call.append((len(read) - before[0], sum(1 for n in scanned[before[1]:] if n >= 256)))
        history.append({"role": "assistant", "content": f"Wharf {i}: six to ten."})
    # Each call read one text for passages and scanned one long text for instructions: its new question.
    assert per_call == [(1, 1)] * 4
    shapes = _shapes(traced)
    assert len(shapes) == 4 and all(s["llmtrace.evidence.chunks_in"] == 3 for s in shapes)
