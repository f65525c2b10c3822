"""Hold-out cut tool calls: an agent that passes ``tools=`` with a small ``max_tokens`` gets every tool call cut
at the cap. That is a truncation the app suffers only when it goes on with the cut answer (sends it back in a
later prompt); an agent whose next steps are its own (a loop that re-asks one lookup, a fan-out over other
records) shares a trace or a session with the cut passes and carries none of them.

- a stuck loop (the same call over and over): ``loop.budget`` first, the cut calls no warning ahead of it;
- its clean twin (one lookup per record, each once): nothing above info;
- an agent that sends the cut answer back and carries on: the warning at ``gen.stop``.

The same with a tool call the model must make (OpenAI ``tool_choice="required"``, Anthropic ``{"type": "any"}``):
the cut call comes back as text shaped like a call that does not parse, which is no harm of its own (the app
was not going to parse it as an answer; it matters, as any cut call does, when the app goes on with it).

Through the real OpenAI and Anthropic SDKs wrapped by ``instrument()``, streamed and not, against the real
backend (tiny model), and ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest
from testkit import API_SHAPE_IDS, API_SHAPES, diagnose_json

DESK = ("You run the front desk of a bike-repair shop. Look repairs up with the tools before answering and "
        "never quote a price you did not look up. ") * 2
FUNCS = [("repair_status", "Status of one repair ticket."), ("parts_stock", "Whether a part is in stock.")]
OPENAI_TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
    "type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]}}} for n, d in FUNCS]
ANTHROPIC_TOOLS = [{"name": n, "description": d, "input_schema": {
    "type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]}} for n, d in FUNCS]
STEPS = 5


class Agent:
    """One model call with the tools, and how a turn of the conversation is written back, per API."""

    def __init__(self, srv: Any, api: str, stream: bool, forced: bool = False) -> None:
        self.api, self.stream = api, stream
        # a tool call the model must make (OpenAI tool_choice "required", Anthropic {"type": "any"}): this backend
        # sends a cut one back as its text, `{"name": "repair_st`, which the client pass records as an answer
        # that does not parse
        self.choice: dict[str, Any] = ({"tool_choice": "required" if api == "openai" else {"type": "any"}}
                                       if forced else {})
        if api == "openai":
            self.client = live.client(srv)
        else:
            import anthropic

            from llmtrace.adapters import instrument

            self.client = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))

    def start(self, question: str) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": DESK}] if self.api == "openai" else []
        return [*head, {"role": "user", "content": question}]

    def call(self, msgs: list[dict[str, Any]]) -> dict[str, Any]:
        """The model's answer as the app writes it back: the assistant turn as the SDK gave it (a cut call
        comes back from this backend as its partial text), or the streamed text put together."""
        if self.api == "openai":
            r = self.client.chat.completions.create(model="tiny", messages=msgs, tools=OPENAI_TOOLS, max_tokens=6,
                                                    temperature=0, stream=self.stream, **self.choice)
            if self.stream:
                return {"role": "assistant", "content": "".join(ch.choices[0].delta.content or "" for ch in r
                                                                if ch.choices)}
            return dict(r.choices[0].message.model_dump(exclude_none=True))
        kw = {"model": "tiny", "system": DESK, "messages": msgs, "tools": ANTHROPIC_TOOLS, "max_tokens": 6,
              "extra_body": {"temperature": 0}, **self.choice}  # this SDK has no temperature argument
        if self.stream:
            with self.client.messages.stream(**kw) as st:
                return {"role": "assistant", "content": "".join(st.text_stream)}
        r = self.client.messages.create(**kw)
        return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]}

    def tool_turn(self, cid: str, name: str, args: dict[str, str], result: str) -> list[dict[str, Any]]:
        """The app's own tool call and its result, appended to the conversation."""
        if self.api == "openai":
            return [{"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": {
                        "name": name, "arguments": json.dumps(args)}}]},
                    {"role": "tool", "tool_call_id": cid, "content": result}]
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": name, "input": args}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": result}]}]


def _loop(agent: Agent, stuck: bool) -> None:
    """Three customers; for each the agent calls the model, then runs a tool of its own choosing: the same
    lookup every step (stuck), or one lookup per ticket of the customer's (the twin), and answers."""
    for run in range(3):
        msgs = agent.start(f"How are my repairs going? customer {run}")
        for step in range(STEPS):
            agent.call(msgs)
            ticket = f"R-{run}0" if stuck else f"R-{run}{step}"
            # each ticket's own status (the same answer to every ticket would be calls that make no progress)
            msgs = msgs + agent.tool_turn(f"c{run}x{step}", "repair_status", {"ticket": ticket},
                                          "waiting on parts" if stuck else f"{ticket}: waiting on parts")
        agent.call(msgs)


def _fan_out(agent: Agent, stuck: bool) -> None:
    """Many independent calls in one trace and one session: an agent turn that asks the model about each of
    six tickets at once (``fan_out`` threads under ``agent()``), none of them sent back, then answers."""
    del stuck
    import llmtrace
    from llmtrace.adapters.helpers import loops

    for run in range(2):
        with llmtrace.session(f"desk-{run}"), loops.agent("desk"):
            loops.fan_out([f"R-{run}{k}" for k in range(6)],
                          lambda t: agent.call(agent.start(f"What is the status of repair {t}?")), max_workers=3)
            agent.call(agent.start("Summarise the six repairs for the customer."))


def _carried(agent: Agent, stuck: bool) -> None:
    """The planted truncation: the app takes what came back (a tool call cut mid-arguments), writes it into
    the conversation as the assistant's turn, and carries on, finish reason unread."""
    del stuck
    for run in range(3):
        msgs = agent.start(f"Is the chain for ticket R-{run} in stock?")
        for _ in range(2):
            msgs = msgs + [agent.call(msgs), {"role": "user", "content": "Go on, and then?"}]
        agent.call(msgs)


def _run(tmp_path: Path, api: str, stream: bool, app: Any, stuck: bool, forced: bool = False) -> Path:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    with live.store(db, capture="hashes"):
        app(Agent(srv, api, stream, forced), stuck)
    return db


@pytest.mark.parametrize(("api", "stream"), API_SHAPES, ids=API_SHAPE_IDS)
def test_stuck_loop_with_cut_tool_calls_is_the_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    api: str, stream: bool) -> None:
    found = diagnose_json(_run(tmp_path, api, stream, _loop, True), capsys)
    cut = [f for f in found if f["stage"] == "gen.stop"]
    assert cut, found  # every tool call was cut: reported
    assert found[0]["stage"] == "loop.budget", [(f["severity"], f["stage"], f["title"]) for f in found]
    assert cut[0]["severity"] == "info", cut[0]  # the app never sent a cut call back


@pytest.mark.parametrize(("api", "stream"), API_SHAPES, ids=API_SHAPE_IDS)
@pytest.mark.parametrize("fan_out", [False, True], ids=["one-a-step", "fan-out"])
def test_independent_calls_with_cut_tool_calls_are_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         api: str, stream: bool, fan_out: bool) -> None:
    found = diagnose_json(_run(tmp_path, api, stream, _fan_out if fan_out else _loop, False), capsys)
    loud = [(f["severity"], f["stage"], f["title"]) for f in found if f["severity"] != "info"]
    assert not loud, loud
    assert any(f["stage"] == "gen.stop" for f in found), found  # the cut calls are still reported, as info


@pytest.mark.parametrize(("api", "stream"), API_SHAPES, ids=API_SHAPE_IDS)
def test_cut_tool_call_sent_back_is_the_truncation(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   api: str, stream: bool) -> None:
    found = diagnose_json(_run(tmp_path, api, stream, _carried, False), capsys)
    assert found and found[0]["stage"] == "gen.stop", [(f["severity"], f["stage"], f["title"]) for f in found]
    assert found[0]["severity"] != "info", found[0]
    assert "went on" in found[0]["summary"], found[0]["summary"]


@pytest.mark.parametrize(("api", "stream"), API_SHAPES, ids=API_SHAPE_IDS)
@pytest.mark.parametrize("app", ["stuck", "fan-out", "written-back"])
def test_forced_tool_choice_cut_calls_that_do_not_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       api: str, stream: bool, app: str) -> None:
    run = {"stuck": _loop, "fan-out": _fan_out, "written-back": _carried}[app]
    found = diagnose_json(_run(tmp_path, api, stream, run, app == "stuck", forced=True), capsys)
    seen = [(f["severity"], f["stage"], f["title"]) for f in found]
    cut = [f for f in found if f["stage"] == "gen.stop"]
    assert cut, seen  # every call was cut: reported
    if app == "stuck":
        assert found[0]["stage"] == "loop.budget", seen
        assert cut[0]["severity"] == "info", cut[0]  # the app never sent a cut call back
    elif app == "fan-out":
        assert not [s for s in seen if s[0] != "info"], seen
    else:
        assert found[0]["stage"] == "gen.stop" and found[0]["severity"] != "info", seen
        assert "went on" in found[0]["summary"], found[0]["summary"]
