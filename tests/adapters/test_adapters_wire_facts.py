"""The facts a wire compaction lost, read incrementally: each call of a conversation reads only the turns
its previous request lacked, and the facts it records are those a full rescan of both requests gives.

Real OpenAI SDK, instrumented, against the loopback fake provider; two conversations interleaved (one
inferred from its prefix chain, one named with ``llmtrace.session``), each compacted by the app mid-way
and grown again afterwards. The expected facts are computed from the request bytes the provider received,
read from scratch (a fresh parser's segments, ``facts.wire_facts`` over all of them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, FakeProvider, Script, fake_provider
from adapters_store import rows

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.adapters.middleware.openai_parser import OpenAIParser
from llmtrace.tracer.reading import facts as compaction

Msg = dict[str, Any]


def _turn(tag: str, i: int) -> list[Msg]:
    """One agent turn: a question with pasted passages, a tool call, its result, the answer."""
    passages = "\n\n".join(f"[{j}] Berth {tag}-{i}{j} at Harrowgate Dock takes {40 + j} reefers per shift."
                           for j in range(3))
    return [
        {"role": "user", "content": f"Context:\n\n{passages}\n\nCan truck KF-{tag}{i} use Berth {tag}-{i}0?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{tag}{i}", "type": "function",
                      "function": {"name": "lookup", "arguments": json.dumps({"truck": f"KF-{tag}{i}"})}}]},
        {"role": "tool", "tool_call_id": f"call_{tag}{i}", "content": f"KF-{tag}{i}: slot {i}:30, Gate Norrland {i}"},
        {"role": "assistant", "content": f"Yes, KF-{tag}{i} may use Berth {tag}-{i}0 at {i}:30 through Gate Norrland {i}."},
    ]


def _plan(tag: str) -> list[list[Msg]]:
    """The requests of one conversation: it grows five turns, is compacted to a summary, grows three more,
    and is compacted again. The compactions keep the opening question (an inferred conversation is known
    by its opening once its history is rewritten)."""
    system = {"role": "system", "content": f"You dispatch trucks for Osterby Haulage, desk {tag}."}
    history: list[Msg] = [system]
    out: list[list[Msg]] = []
    for i in range(5):
        history += _turn(tag, i)
        out.append(list(history[:-1]))  # the request ends with the tool result: the answer is the reply
    summary = {"role": "user", "content": f"Summary: trucks KF-{tag}0 and KF-{tag}3 were booked at Harrowgate."}
    history = [system, history[1], summary, *history[-4:]]
    out.append(list(history))
    for i in range(5, 8):
        history += _turn(tag, i)
        out.append(list(history))
    history = [system, history[1], {"role": "user", "content": "Summary: several trucks were booked."}, *history[-2:]]
    out.append(list(history))
    return out


@pytest.fixture()
def provider() -> Iterator[FakeProvider]:
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        yield fp


@pytest.fixture()
def scanned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text the middleware reads facts from (a spy: the real ``facts`` still runs)."""
    seen: list[int] = []
    real: Callable[[str], set[str]] = compaction.facts

    def spy(text: str) -> set[str]:
        seen.append(len(text))
        return real(text)

    monkeypatch.setattr(compaction, "facts", spy)
    return seen


def _full_rescan(body: bytes) -> dict[str, str]:
    parser = OpenAIParser()
    parser.on_request(json.loads(body))
    return compaction.wire_facts([t for kind, t in parser.obs.segments if kind != "tools"])


def _compactions(db: Path) -> dict[str, dict[str, Any]]:
    """loop.compaction values by the pass span they belong to."""
    found = rows(db, "SELECT parent_span_id, attributes FROM spans WHERE stage = 'loop.compaction'")
    return {str(r["parent_span_id"]): r["attributes"] for r in found}


def test_interleaved_compacted_conversations_lose_the_facts_a_full_rescan_finds(
    traced: Path, provider: FakeProvider, scanned: list[int]
) -> None:
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    plans = {"A": _plan("A"), "B": _plan("B")}
    order: list[tuple[str, int]] = []
    per_call_scanned: list[int] = []
    for k in range(len(plans["A"])):
        for tag in ("A", "B"):
            before = len(scanned)
            if tag == "B":
                with llmtrace.session("desk-b"):
                    client.chat.completions.create(model="gpt-4o-mini", messages=plans[tag][k], max_tokens=1)
            else:
                client.chat.completions.create(model="gpt-4o-mini", messages=plans[tag][k], max_tokens=1)
            per_call_scanned.append(sum(scanned[before:]))
            order.append((tag, k))
    bodies = [body for _, _, body in provider.requests]
    assert len(bodies) == len(order)
    passes = rows(traced, "SELECT span_id, session_id FROM requests WHERE side = 'client' ORDER BY start_ns")
    assert len(passes) == len(order)
    assert len({p["session_id"] for p in passes}) == 2  # two conversations, each kept apart from the other
    compactions = _compactions(traced)
    checked = 0
    for n, (tag, k) in enumerate(order):
        c = compactions.get(str(passes[n]["span_id"]))
        if c is None or not c["llmtrace.compaction.history_rewritten"]:
            continue
        prev = n - 2  # the same conversation's previous request (the two alternate)
        assert order[prev] == (tag, k - 1)
        was, now = _full_rescan(bodies[prev]), _full_rescan(bodies[n])
        expected = sorted(label for h, label in was.items() if h not in now)[:200]
        assert len(expected) >= 4  # the compaction really dropped facts: the test is not vacuous
        assert c["llmtrace.compaction.facts_lost"] == expected
        assert c["llmtrace.compaction.facts_lost_count"] == len(expected)
        checked += 1
    assert checked == 4  # both conversations, both compactions each
    # Each call read only the texts its conversation's previous request lacked (a text is known by itself
    # and where it starts), not the whole history again.
    def placed(body: bytes) -> list[tuple[str, int]]:
        out, at = [], 0
        for t in _texts(body):
            out.append((t, at))
            at += len(t)
        return out

    for n in range(len(order)):
        known = set(placed(bodies[n - 2])) if n >= 2 else set()
        assert per_call_scanned[n] == sum(len(t) for t, at in placed(bodies[n]) if (t, at) not in known), n
    history_chars = sum(len(t) for b in bodies for t in _texts(b))
    assert sum(per_call_scanned) < 0.4 * history_chars


def _texts(body: bytes) -> list[str]:
    parser = OpenAIParser()
    parser.on_request(json.loads(body))
    return [t for kind, t in parser.obs.segments if kind != "tools"]


def test_what_one_set_up_remembered_is_not_reused_under_another(traced: Path, tmp_path: Path) -> None:
    """Labels depend on the capture mode and the store's key: facts a conversation remembered under one
    set-up are read again under another (a new ``init`` also forgets conversations; this is the guard)."""
    from llmtrace.tracer import capture

    texts = _texts(json.dumps({"messages": _plan("C")[1]}).encode())
    first = compaction.wire_facts_since(texts, None)
    assert first.labels == compaction.wire_facts(texts) and len(first.labels) >= 4
    assert compaction.wire_facts_since(texts, first) == first  # the same set-up: all of it reused
    capture.set_mode("full")
    try:
        full = compaction.wire_facts_since(texts, first)
        assert "Harrowgate Dock" in full.labels.values() and "Harrowgate Dock" not in first.labels.values()
        assert full.labels == compaction.wire_facts(texts)
    finally:
        capture.set_mode("hashes")
    llmtrace.init(db=tmp_path / "other.duckdb", service_name="test", strict=True)  # another store, another key
    other = compaction.wire_facts_since(texts, first)
    assert other.labels == compaction.wire_facts(texts) and set(other.labels).isdisjoint(first.labels)


NAMES = ("Hallgrim", "Ingeborg", "Torvald", "Sigrun")


def _anthropic_turn(i: int) -> list[Msg]:
    return [
        {"role": "user", "content": f"Skipper {NAMES[i]} asks: is Berth {40 + i} free at Harrowgate Dock?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, {
            "type": "tool_use", "id": f"tu{i}", "name": "berths", "input": {"berth": 40 + i}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu{i}",
                                      "content": f"Berth {40 + i}: free from {i + 6}:00, pilot {NAMES[i]}sen"}]},
        {"role": "assistant", "content": f"Yes, {NAMES[i]}: Berth {40 + i} is free from {i + 6}:00."},
    ]


def _responses_turn(i: int) -> list[Msg]:
    return [
        {"role": "user", "content": [{"type": "input_text",
                                      "text": f"Skipper {NAMES[i]} asks: is Berth {40 + i} free at Harrowgate Dock?"}]},
        {"type": "function_call", "call_id": f"fc{i}", "name": "berths", "arguments": json.dumps({"berth": 40 + i})},
        {"type": "function_call_output", "call_id": f"fc{i}", "output": f"Berth {40 + i}: free, pilot {NAMES[i]}sen"},
        {"role": "assistant", "content": [{"type": "output_text", "text": f"Yes, {NAMES[i]}: Berth {40 + i} is free."}]},
    ]


def _grown_then_compacted(turn: Callable[[int], list[Msg]]) -> list[list[Msg]]:
    """Four turns a request at a time, then the middle two replaced by a summary that names only one of
    their skippers (the opening question and the last turn kept)."""
    history: list[Msg] = []
    out = []
    for i in range(4):
        history += turn(i)
        out.append(list(history))
    out.append([*history[:1], {"role": "user", "content": "Summary: the berth for Ingeborg was confirmed."}, *history[-4:]])
    return out


@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_other_apis_compactions_lose_the_facts_a_full_rescan_finds(tmp_path: Path, provider: FakeProvider, api: str) -> None:
    import anthropic

    from llmtrace.adapters.middleware.anthropic_parser import AnthropicParser
    from llmtrace.adapters.middleware.responses_parser import ResponsesParser
    from llmtrace.tracer import capture

    provider.scripts["/v1/messages"] = Script(chunks=[json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1}}).encode()])
    provider.scripts["/v1/responses"] = Script(chunks=[json.dumps({
        "id": "resp_1", "object": "response", "model": "gpt-4.1-mini", "status": "completed",
        "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
        "usage": {"input_tokens": 50, "output_tokens": 1, "total_tokens": 51}}).encode()])
    db = tmp_path / "full.duckdb"
    llmtrace.init(db=db, service_name="test", strict=True, capture="full")  # the labels are the facts
    try:
        if api == "anthropic":
            ac = instrument(anthropic.Anthropic(api_key="test", base_url=provider.base_url, max_retries=0))
            for msgs in _grown_then_compacted(_anthropic_turn):
                ac.messages.create(model="claude-sonnet-4-5", max_tokens=1, system="You dispatch for Osterby Haulage.",
                                   messages=msgs)
        else:
            oc = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
            for msgs in _grown_then_compacted(_responses_turn):
                oc.responses.create(model="gpt-4.1-mini", instructions="You dispatch for Osterby Haulage.",
                                    input=msgs)
        comp = [r["attributes"] for r in rows(db, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
        parser_of = AnthropicParser if api == "anthropic" else ResponsesParser

        def rescan(body: bytes) -> dict[str, str]:
            parser = parser_of()
            parser.on_request(json.loads(body))
            return compaction.wire_facts([t for kind, t in parser.obs.segments if kind != "tools"])

        bodies = [b for _, _, b in provider.requests]
        was, now = rescan(bodies[-2]), rescan(bodies[-1])
        expected = sorted(label for h, label in was.items() if h not in now)
        assert len(comp) == 1 and comp[0]["llmtrace.compaction.facts_lost"] == expected
        assert "Torvald" in expected and "Ingeborg" not in expected and "Hallgrim" not in expected
    finally:
        llmtrace.shutdown()
        capture.set_mode("hashes")
