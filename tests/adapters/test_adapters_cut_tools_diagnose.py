"""A tool call cut at max_tokens by a hosted provider's API shape (OpenAI ``tool_calls``, Anthropic ``tool_use``),
through the real SDKs wrapped by ``instrument()``, streamed and not, then ``llmtrace diagnose --json``:

- the app writes the cut call back as the assistant's turn and carries on: the warning is at ``gen.stop``,
  saying the app went on with it (the answer's hash is found in the later prompt: tracer/reading/assistant_turn.py);
- the same cut calls, none written back (a fan-out of independent calls in one trace and session): reported
  at ``gen.stop`` as info only.

The provider is a loopback stub playing the recorded wire shapes (``adapters_cut_shapes``): our own server
returns a call cut mid-arguments as text, which is not what a hosted provider sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adapters_cut_shapes as shapes
import anthropic
import openai
import pytest
from adapters_fake_provider import FakeProvider, Script, fake_provider
from testkit import API_SHAPE_IDS, API_SHAPES, diagnose_json

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.adapters.helpers import loops

TOOLS = [{"type": "function", "function": {"name": "parts_stock", "parameters": {
    "type": "object", "properties": {"ticket": {"type": "string"}}}}}]
A_TOOLS = [{"name": "parts_stock", "input_schema": {"type": "object", "properties": {"ticket": {"type": "string"}}}}]


class Agent:
    """One model call against the stub, and the assistant turn as the app writes it back, per API."""

    def __init__(self, stub: FakeProvider, api: str, stream: bool) -> None:
        self.api, self.stream = api, stream
        sse = "text/event-stream"
        if api == "openai":
            stub.scripts["/v1/chat/completions"] = (Script(content_type=sse, chunks=shapes.chat_stream(True))
                                                    if stream else Script(chunks=[shapes.chat_body(True)]))
            self.oc = instrument(openai.OpenAI(base_url=stub.base_url + "/v1", api_key="sk-test", max_retries=0))
        else:
            stub.scripts["/v1/messages"] = (
                Script(content_type=sse, chunks=shapes.anthropic_stream(('{"ticket": ', '"R-1'))) if stream
                else Script(chunks=[shapes.anthropic_body()]))
            self.ac = instrument(anthropic.Anthropic(base_url=stub.base_url, api_key="test", max_retries=0))

    def start(self, question: str) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": "You run a bike shop's front desk."}] if self.api == "openai" else []
        return [*head, {"role": "user", "content": question}]

    def call(self, msgs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.api == "openai":
            kw: dict[str, Any] = {"model": "gpt-4o-mini", "messages": msgs, "tools": TOOLS, "max_tokens": 6}
            if not self.stream:
                return dict(self.oc.chat.completions.create(**kw).choices[0].message.model_dump(exclude_none=True))
            calls: dict[int, dict[str, Any]] = {}
            for ch in self.oc.chat.completions.create(**kw, stream=True):
                for tc in (tc for c in ch.choices for tc in c.delta.tool_calls or ()):
                    call = calls.setdefault(tc.index, {"id": "", "type": "function",
                                                       "function": {"name": "", "arguments": ""}})
                    call["id"] = tc.id or call["id"]
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
            return {"role": "assistant", "content": None, "tool_calls": [calls[k] for k in sorted(calls)]}
        akw: dict[str, Any] = {"model": "claude-x", "messages": msgs, "tools": A_TOOLS, "max_tokens": 6}
        if self.stream:
            with self.ac.messages.stream(**akw) as st:
                return {"role": "assistant", "content": st.get_final_message().content}
        return {"role": "assistant", "content": self.ac.messages.create(**akw).content}

    def results(self, turn: dict[str, Any]) -> list[dict[str, Any]]:
        """The app's answer to each (cut) call: the tool's error."""
        if self.api == "openai":
            return [{"role": "tool", "tool_call_id": t["id"], "content": "error: bad arguments"}
                    for t in turn["tool_calls"]]
        return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "error"}
                                             for b in turn["content"] if b.type == "tool_use"]}]


def _carried(agent: Agent) -> None:
    """The planted truncation: the cut calls written back as the assistant's turn, the app carrying on."""
    for run in range(3):
        msgs = agent.start(f"Is the chain for ticket R-{run} in stock?")
        for _ in range(2):
            turn = agent.call(msgs)
            msgs = [*msgs, turn, *agent.results(turn)]
        agent.call(msgs)


def _fan_out(agent: Agent) -> None:
    """Independent calls in one trace and one session, none written back, then a summary."""
    for run in range(2):
        with llmtrace.session(f"desk-{run}"), loops.agent("desk"):
            loops.fan_out([f"R-{run}{k}" for k in range(6)],
                          lambda t: agent.call(agent.start(f"Is the chain for ticket {t} in stock?")), max_workers=3)
            agent.call(agent.start("Summarise the six tickets for the customer."))


@pytest.fixture
def stub() -> Iterator[FakeProvider]:
    with fake_provider() as fp:
        yield fp


def _run(tmp_path: Path, stub: FakeProvider, api: str, stream: bool, app: Any, capture: str) -> Path:
    db = tmp_path / "t.duckdb"
    llmtrace.init(db=db, service_name="desk", strict=True, capture=capture)
    try:
        app(Agent(stub, api, stream))
    finally:
        llmtrace.shutdown()
    return db


@pytest.mark.parametrize("capture", ["hashes", "full"])
@pytest.mark.parametrize(("api", "stream"), API_SHAPES, ids=API_SHAPE_IDS)
def test_cut_provider_tool_call_written_back_is_the_truncation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], stub: FakeProvider, api: str, stream: bool,
        capture: str) -> None:
    found = diagnose_json(_run(tmp_path, stub, api, stream, _carried, capture), capsys)
    cut = [f for f in found if f["stage"] == "gen.stop"]
    assert cut and cut[0]["severity"] != "info", [(f["severity"], f["stage"], f["title"]) for f in found]
    assert "went on" in cut[0]["summary"], cut[0]["summary"]


@pytest.mark.parametrize(("api", "stream"), API_SHAPES, ids=API_SHAPE_IDS)
def test_cut_provider_tool_calls_not_written_back_are_info(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], stub: FakeProvider, api: str, stream: bool) -> None:
    found = diagnose_json(_run(tmp_path, stub, api, stream, _fan_out, "hashes"), capsys)
    cut = [f for f in found if f["stage"] == "gen.stop"]
    assert cut, found  # the cut calls are reported
    assert all(f["severity"] == "info" for f in cut), [(f["severity"], f["title"], f["summary"]) for f in cut]
    assert not any("went on" in f["summary"] for f in cut), cut
