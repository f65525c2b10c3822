"""The support agent the demo runs: a ticket thread, a system prompt with tool definitions, two tools
(account record and order status) called once in parallel and once in sequence, and a streamed answer —
plus the three complaints: a timestamp at the top of the system prompt (slow first token), the same
ticket answered differently (sampling), and a long session that loses a detail to compaction.

Everything goes through the real OpenAI SDK, instrumented by ``llmtrace.adapters``, against the bundled
backend; the app-side helpers record what no server sees (system-prompt assembly, tool dispatch, fan-out,
compaction, stop-reason checks).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmtrace.adapters.helpers.compaction import compact
from llmtrace.adapters.helpers.loops import ToolCall, dispatch, fan_out
from llmtrace.adapters.helpers.prompt_assembly import SystemPromptAssembler
from llmtrace.adapters.helpers.stop_reason import check_stop

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_account", "description": "Look up the customer's account record.",
        "parameters": {"type": "object", "properties": {"customer_id": {"type": "string", "maxLength": 8}},
                       "required": ["customer_id"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_order_status", "description": "Look up where an order is.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "maxLength": 8}},
                       "required": ["order_id"], "additionalProperties": False}}},
]

POLICY = (
    "You are the support agent of Acme Home, a shop for kitchen appliances. Answer in two or three short "
    "sentences, in a friendly tone. Use the tools to look up the customer's account and orders before you "
    "promise anything. Refunds are possible within 30 days of delivery; replacements ship within 3 "
    "business days; broken items need a photo. Never share another customer's data."
)
STABLE = POLICY  # deploy v1
WITH_CLOCK = "Current time: {now}\n" + POLICY  # deploy v2: the clock goes to the top "for context"


@dataclass(frozen=True, slots=True)
class Ticket:
    customer: str
    order: str
    thread: tuple[tuple[str, str], ...]


TICKETS = (
    Ticket("C-1042", "48213", (
        ("user", "Hi, my blender (order 48213) arrived with a cracked jug."),
        ("assistant", "I'm sorry about that. Could you send a photo of the crack?"),
        ("user", "Photo attached. Can I get a replacement, and when would it arrive?"))),
    Ticket("C-2210", "51877", (
        ("user", "Order 51877 still says 'processing' after a week."),
        ("assistant", "Let me check that for you."),
        ("user", "Please do, I need the kettle before the weekend."))),
    Ticket("C-3307", "60092", (
        ("user", "I was charged twice for order 60092."),
        ("assistant", "Thanks for telling us; I'll look into the payment."),
        ("user", "Can you refund the second charge?"))),
    Ticket("C-4471", "62540", (
        ("user", "The toaster from order 62540 trips the breaker."),
        ("assistant", "That sounds unsafe; please stop using it."),
        ("user", "Done. What now, refund or replacement?"))),
)

ACCOUNTS = {t.customer: {"customer_id": t.customer, "tier": "plus", "since": "2021"} for t in TICKETS}
ORDERS = {t.order: {"order_id": t.order, "status": "delivered", "eta_days": 0} for t in TICKETS}


def get_account(customer_id: str) -> dict[str, str]:
    return ACCOUNTS.get(customer_id, {"customer_id": customer_id, "tier": "standard"})


def get_order_status(order_id: str) -> dict[str, object]:
    return ORDERS.get(order_id, {"order_id": order_id, "status": "unknown"})


FUNCTIONS: dict[str, Callable[..., Any]] = {"get_account": get_account, "get_order_status": get_order_status}


class SupportAgent:
    """The app under test. ``clock`` puts the time at the top of the system prompt (the deploy-v2 bug)."""

    def __init__(self, client: Any, model: str, *, temperature: float = 0.0, answer_tokens: int = 40,
                 tracer: Any = None) -> None:
        self.client = client
        self.tracer = tracer  # an OpenTelemetry tracer: each agent turn becomes one trace
        self.model = model
        self.temperature = temperature
        self.answer_tokens = answer_tokens
        self.clock = False
        self._stable = SystemPromptAssembler(STABLE)
        self._clocked = SystemPromptAssembler(WITH_CLOCK)

    def turn(self, name: str) -> Any:
        """One agent turn as one trace: its passes, tool calls and checks hang under this span."""
        if self.tracer is None:
            return contextlib.nullcontext()
        return self.tracer.start_as_current_span(name)

    def system_prompt(self) -> str:
        # Built for every pass, as most apps do; harmless until a per-call value sits near the top.
        if self.clock:
            return self._clocked.assemble(now=dt.datetime.now().isoformat()).text
        return self._stable.assemble().text

    def _messages(self, ticket: Ticket, extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
        thread = [{"role": r, "content": c} for r, c in ticket.thread]
        head = f"(customer {ticket.customer}) " + thread[0]["content"]
        thread[0] = {"role": "user", "content": head}
        return [{"role": "system", "content": self.system_prompt()}, *thread, *extra]

    def _run_tool(self, ticket: Ticket, name: str, call_id: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run one tool; returns (the assistant message that called it, the tool message with its result)."""
        call_id = call_id or f"call_{name}"
        # The small model's argument is not trusted: the app knows whose ticket this is.
        args = {"customer_id": ticket.customer} if name == "get_account" else {"order_id": ticket.order}
        result = dispatch(ToolCall(name, args, call_id), FUNCTIONS[name], scope="read")
        assistant = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
        return assistant, {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}

    @staticmethod
    def _call_of(response: Any) -> tuple[str | None, str | None]:
        """(tool name, call id) of the first tool call in a response, if the model made one."""
        calls = response.choices[0].message.tool_calls or []
        if calls and calls[0].function.name in FUNCTIONS:
            return calls[0].function.name, calls[0].id
        return None, None

    def _answer(self, ticket: Ticket, extra: list[dict[str, Any]], temperature: float | None = None) -> str:
        # No tools on the answering pass: a small model shown the tool format tends to answer in it. The
        # system prompt and thread still come first, so that much of the prefix is shared with the tool passes.
        note = {"role": "user", "content": "Now reply to the customer in two plain sentences."}
        stream = self.client.chat.completions.create(
            model=self.model, messages=self._messages(ticket, [*extra, note]),
            max_tokens=self.answer_tokens, temperature=self.temperature if temperature is None else temperature,
            stream=True, stream_options={"include_usage": True})
        parts: list[str] = []
        finish = None
        for chunk in stream:
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        text = "".join(parts)
        check_stop(text, finish)
        return text

    def handle_parallel(self, ticket: Ticket) -> str:
        """Both lookups in one turn: one pass asks for a tool, the app runs both tools at once."""
        with self.turn(f"support turn {ticket.customer} (parallel tools)"):
            r = self.client.chat.completions.create(
                model=self.model, messages=self._messages(ticket, []), tools=TOOLS, max_tokens=32, temperature=0,
                tool_choice="required")
            first, call_id = self._call_of(r)
            first = first or "get_account"
            # The model asks for one tool per pass; the other lookup is independent, so the app adds it to the
            # same turn and both run in parallel.
            calls = [(first, call_id), ("get_order_status" if first == "get_account" else "get_account", None)]
            done = fan_out(calls, lambda c: self._run_tool(ticket, c[0], c[1]), mode="parallel", passes=2)
            extra: list[dict[str, Any]] = []
            for item in done:
                if isinstance(item, Exception):
                    raise item
                extra.extend(item)
            return self._answer(ticket, extra)

    def handle_sequential(self, ticket: Ticket) -> str:
        """One lookup per pass: account first, then the order — three passes for the turn."""
        with self.turn(f"support turn {ticket.customer} (sequential tools)"):
            extra: list[dict[str, Any]] = []

            def step(name: str) -> None:
                assistant, tool = self._call_tool_with(ticket, name, extra)
                extra.extend([assistant, tool])

            fan_out(["get_account", "get_order_status"], step, mode="sequential", passes=3)
            return self._answer(ticket, extra)

    def _call_tool_with(self, ticket: Ticket, name: str, extra: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        r = self.client.chat.completions.create(
            model=self.model, messages=self._messages(ticket, list(extra)), tools=TOOLS, max_tokens=32,
            temperature=0, tool_choice={"type": "function", "function": {"name": name}})
        return self._run_tool(ticket, name, self._call_of(r)[1])

    def answer_again(self, ticket: Ticket, temperature: float) -> str:
        """The customer asks the same thing again (the same prompt, the app's sampling settings)."""
        with self.turn(f"support turn {ticket.customer} (asked again)"):
            return self._answer(ticket, [], temperature=temperature)

    def long_session(self, ticket: Ticket, trigger_tokens: int = 120) -> tuple[str, tuple[str, ...]]:
        """A long chat; older turns are compacted by a model-written summary, then the detail is asked for."""
        with self.turn(f"support session {ticket.customer} (long)"):
            turns = [
                ("user", f"Hello, I'm {ticket.customer}. My order {ticket.order} was a blender for 129.90 EUR."),
                ("assistant", "Thanks! How can I help with the blender?"),
                ("user", "The lid does not lock, so it will not start."),
                ("assistant", "Could you try pressing the lid down until it clicks?"),
                ("user", "Tried that twice, nothing. The light blinks red."),
                ("assistant", "A blinking red light usually means the lid sensor is faulty."),
                ("user", "So what can you do? I use it every morning."),
                ("assistant", "We can ship a replacement lid or a whole new blender."),
                ("user", "A new blender please. Delivery after Friday only, I'm away until then."),
                ("assistant", "Noted: a new blender, delivered after Friday."),
            ]
            messages = [{"role": "system", "content": self.system_prompt()}] + [{"role": r, "content": c} for r, c in turns]

            def summarize(old: list[Mapping[str, Any]]) -> str:
                text = "\n".join(f"{m['role']}: {m['content']}" for m in old)
                r = self.client.chat.completions.create(
                    model=self.model, max_tokens=40, temperature=0,
                    messages=[{"role": "system", "content": "Summarize the conversation in one short sentence."},
                              {"role": "user", "content": text}])
                return r.choices[0].message.content or ""

            result = compact(messages, summarize, trigger_tokens=trigger_tokens, keep_last=2)
            question = {"role": "user", "content": "Sorry, which order number was this again?"}
            r = self.client.chat.completions.create(model=self.model, messages=[*result.messages, question],
                                                    max_tokens=24, temperature=0)
            return r.choices[0].message.content or "", result.facts_lost
