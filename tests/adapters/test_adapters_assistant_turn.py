"""An answer and the same answer written back into the next prompt hash alike (adapters/assistant_turn.py):
``llmtrace.output.hash`` of a pass is the hash of the ``history:assistant`` segment the app's next prompt
carries, for every shape a hosted provider returns and an app sends back. That is how the truncation
analyzer sees that the app went on with an answer cut at max_tokens.

A loopback stub plays recorded-shape responses of a cut tool call (OpenAI ``tool_calls`` with partial
arguments and finish_reason length, one and two in parallel; a Responses ``function_call`` item, status
incomplete; Anthropic ``text`` + ``tool_use`` with stop_reason max_tokens), streamed and not; the real
OpenAI and Anthropic SDKs, wrapped by ``instrument()``, call it, and the app writes the turn back the ways
apps do: the SDK's message ``.model_dump()``, a dict it builds, Anthropic's ``response.content`` as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import adapters_cut_shapes as shapes
import anthropic
import openai
import pytest
from adapters_cut_shapes import CUT
from adapters_fake_provider import FakeProvider, Script, fake_provider
from adapters_store import rows
from adapters_tools import WEATHER_TOOL

import llmtrace
from llmtrace.adapters import instrument


@pytest.fixture(params=["hashes", "full"])
def traced_as(request: pytest.FixtureRequest, store_path: Path) -> Iterator[Path]:
    llmtrace.init(db=store_path, service_name="test", strict=True, capture=request.param)
    try:
        yield store_path
    finally:
        llmtrace.shutdown()


@pytest.fixture
def stub() -> Iterator[FakeProvider]:
    with fake_provider() as fp:
        yield fp


def _passes(db: Path) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM spans WHERE name LIKE 'chat %' ORDER BY start_ns")


def _carried(db: Path) -> None:
    """The first pass's output hash is the ``turn`` hash of an assistant segment of the second pass's prompt
    (or, for a text answer, that segment's own hash)."""
    first, second = (p["attributes"] for p in _passes(db))
    h = first["llmtrace.output.hash"]
    segs = json.loads(second["llmtrace.prompt.segments"])
    assert [s["kind"] for s in segs if s.get("turn") == h] == ["history:assistant"], (h, segs)


MSGS: list[dict[str, Any]] = [{"role": "system", "content": "You run a bike shop's front desk."},
                              {"role": "user", "content": "Is the chain for R-1 in stock?"}]
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
    "ticket": {"type": "string"}}}}} for n in ("repair_status", "parts_stock")]


def _openai(stub: FakeProvider) -> openai.OpenAI:
    return instrument(openai.OpenAI(base_url=stub.base_url + "/v1", api_key="sk-test", max_retries=0))


def _unary_dump(c: openai.OpenAI) -> dict[str, Any]:
    r = c.chat.completions.create(model="gpt-4o-mini", messages=MSGS, tools=TOOLS, max_tokens=6)
    return dict(r.choices[0].message.model_dump(exclude_none=True))


def _unary_dump_all(c: openai.OpenAI) -> dict[str, Any]:
    r = c.chat.completions.create(model="gpt-4o-mini", messages=MSGS, tools=TOOLS, max_tokens=6)
    return dict(r.choices[0].message.model_dump())  # refusal, audio, ... sent as null


def _unary_built(c: openai.OpenAI) -> dict[str, Any]:
    m = c.chat.completions.create(model="gpt-4o-mini", messages=MSGS, tools=TOOLS, max_tokens=6).choices[0].message
    return {"role": "assistant", "content": m.content, "tool_calls": [
        {"id": t.id, "type": "function", "function": {"name": t.function.name, "arguments": t.function.arguments}}
        for t in m.tool_calls or ()]}


def _put_together(chunks: Any) -> tuple[dict[str, Any], str | None]:
    """The assistant turn an app puts together from the streamed deltas itself, as the OpenAI cookbook does
    (its tool calls only when some came), and the stream's finish reason."""
    text, calls, finish = "", {}, None
    for ch in chunks:
        for choice in ch.choices:
            finish = choice.finish_reason or finish
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                call = calls.setdefault(tc.index, {"id": "", "type": "function",
                                                   "function": {"name": "", "arguments": ""}})
                call["id"] = tc.id or call["id"]
                call["function"]["name"] += tc.function.name or ""
                call["function"]["arguments"] += tc.function.arguments or ""
    turn: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        turn["tool_calls"] = [calls[k] for k in sorted(calls)]
    return turn, finish


def _stream_built(c: openai.OpenAI) -> dict[str, Any]:
    """The app puts the streamed deltas together itself."""
    return _put_together(c.chat.completions.create(model="gpt-4o-mini", messages=MSGS, tools=TOOLS, max_tokens=6,
                                                   stream=True))[0]


def _stream_helper(c: openai.OpenAI) -> dict[str, Any]:
    """The SDK's own stream helper puts the message together (its get_final_completion raises on a length
    cut, LengthFinishReasonError; the snapshot it kept is the message so far)."""
    with c.chat.completions.stream(model="gpt-4o-mini", messages=MSGS, tools=TOOLS, max_tokens=6) as s:
        for _ in s:
            pass
        final = s.current_completion_snapshot
    return dict(final.choices[0].message.model_dump(exclude_none=True, exclude={"parsed"}))


OPENAI_WAYS: dict[str, tuple[bool, Callable[[openai.OpenAI], dict[str, Any]]]] = {
    "model_dump": (False, _unary_dump), "model_dump-nulls": (False, _unary_dump_all),
    "built": (False, _unary_built), "stream-built": (True, _stream_built), "stream-helper": (True, _stream_helper)}


@pytest.mark.parametrize("parallel", [False, True], ids=["one-call", "parallel"])
@pytest.mark.parametrize("way", list(OPENAI_WAYS))
def test_openai_cut_tool_calls_written_back_hash_as_answered(stub: FakeProvider, traced_as: Path, way: str,
                                                             parallel: bool) -> None:
    stream, answer = OPENAI_WAYS[way]
    stub.scripts["/v1/chat/completions"] = (
        Script(content_type="text/event-stream", chunks=shapes.chat_stream(parallel)) if stream
        else Script(chunks=[shapes.chat_body(parallel)]))
    c = _openai(stub)
    turn = answer(c)
    assert turn["tool_calls"][-1]["function"]["arguments"] == CUT  # the SDK gave the cut call back as it came
    next_msgs = [*MSGS, turn, *({"role": "tool", "tool_call_id": t["id"], "content": "error: cut"}
                               for t in turn["tool_calls"])]
    c.chat.completions.create(model="gpt-4o-mini", messages=next_msgs, tools=TOOLS, max_tokens=6, stream=False)
    _carried(traced_as)


def test_openai_plain_text_answer_hash_is_unchanged(stub: FakeProvider, traced_as: Path) -> None:
    """A text answer's hash is the hash of its text, as before the canonical turn (stored hashes stay
    comparable), and the written-back turn's segment is the same hash."""
    body = json.dumps({"id": "c1", "model": "m", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "Yes, in stock."}, "finish_reason": "length"}], "usage": shapes.USAGE}).encode()
    stub.scripts["/v1/chat/completions"] = Script(chunks=[body])
    c = _openai(stub)
    m = c.chat.completions.create(model="m", messages=MSGS, max_tokens=6).choices[0].message
    c.chat.completions.create(model="m", messages=[*MSGS, m.model_dump(exclude_none=True)], max_tokens=6)
    _carried(traced_as)
    from llmtrace.tracer import capture

    first, second = _passes(traced_as)
    assert first["attributes"]["llmtrace.output.hash"] == capture.hash_text("Yes, in stock.")
    segs = json.loads(second["attributes"]["llmtrace.prompt.segments"])
    assert capture.hash_text("Yes, in stock.") in [s["hash"] for s in segs]  # the segment's own hash too


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_responses_cut_function_call_written_back_hashes_as_answered(stub: FakeProvider, traced_as: Path,
                                                                     stream: bool) -> None:
    stub.scripts["/v1/responses"] = (Script(content_type="text/event-stream", chunks=shapes.responses_stream())
                                     if stream else Script(chunks=[shapes.responses_body()]))
    c = _openai(stub)
    first: list[Any] = [{"role": "user", "content": "Is the chain for R-1 in stock?"}]
    if stream:  # the SDK's stream helper raises on a response that never completed: the app reads the events
        events = list(c.responses.create(model="gpt-4o-mini", input=first, max_output_tokens=6, stream=True))
        r = next(ev.response for ev in events if ev.type == "response.incomplete")
    else:
        r = c.responses.create(model="gpt-4o-mini", input=first, max_output_tokens=6)
    assert r.output[-1].arguments == CUT
    written = [it.model_dump(exclude_none=True) for it in r.output]
    c.responses.create(model="gpt-4o-mini", max_output_tokens=6, input=[
        *first, *written, {"type": "function_call_output", "call_id": "call_1", "output": "error: cut"}])
    _carried(traced_as)


ANTHROPIC_STREAMS = {"cut-in-value": ('{"ticket": ', '"R-1'), "cut-after-value": ('{"ticket": "R-1", ', '"part'),
                     "no-input": ()}


@pytest.mark.parametrize("way", ["content", "model_dump", "stream:cut-in-value", "stream:cut-after-value",
                                 "stream:no-input"])
def test_anthropic_cut_tool_use_written_back_hashes_as_answered(stub: FakeProvider, traced_as: Path,
                                                                way: str) -> None:
    stream = way.startswith("stream:")
    stub.scripts["/v1/messages"] = (
        Script(content_type="text/event-stream", chunks=shapes.anthropic_stream(ANTHROPIC_STREAMS[way[7:]])) if stream
        else Script(chunks=[shapes.anthropic_body()]))
    c = instrument(anthropic.Anthropic(base_url=stub.base_url, api_key="test", max_retries=0))
    tools: list[Any] = [{"name": "parts_stock", "input_schema": {"type": "object"}}]
    first: list[Any] = [{"role": "user", "content": "Is the chain for R-1 in stock?"}]
    kw: dict[str, Any] = {"model": "claude-x", "max_tokens": 6, "tools": tools}
    if stream:
        with c.messages.stream(messages=first, **kw) as s:
            r = s.get_final_message()
    else:
        r = c.messages.create(messages=first, **kw)
    assert r.stop_reason == "max_tokens"
    content: Any = [b.model_dump(exclude_none=True) for b in r.content] if way == "model_dump" else r.content
    c.messages.create(messages=[*first, {"role": "assistant", "content": content}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "error: cut"}]}], **kw)
    _carried(traced_as)


@pytest.mark.parametrize("max_tokens", [40, 4], ids=["whole", "cut"])
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_our_server_tool_calls_written_back_hash_as_answered(tiny_server: Any, traced_as: Path, stream: bool,
                                                             max_tokens: int) -> None:
    """``llmtrace serve`` answers a forced tool choice with real ``tool_calls`` (and a cut one as it cuts it);
    written back as the SDK gave it (or the app put the stream together), the turn hashes as answered."""
    c = instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="sk-test", max_retries=0))
    kw: dict[str, Any] = {"model": "tiny", "messages": MSGS, "tools": [WEATHER_TOOL], "max_tokens": max_tokens,
                          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    turn: dict[str, Any]
    if stream:
        turn, finish = _put_together(c.chat.completions.create(stream=True, **kw))
    else:
        r = c.chat.completions.create(**kw)
        finish, turn = r.choices[0].finish_reason, dict(r.choices[0].message.model_dump(exclude_none=True))
    assert finish == ("tool_calls" if max_tokens == 40 else "length"), (finish, turn)
    if max_tokens == 40:
        assert turn.get("tool_calls"), turn
    c.chat.completions.create(model="tiny", messages=[*MSGS, turn, {"role": "user", "content": "go on"}],
                              max_tokens=2)
    _carried(traced_as)
