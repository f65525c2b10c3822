"""Cases of the diagnosis corpus for issue 35's loops, harm and mechanism items, each with its clean twin:

- loops told from fan-out on tool spans the app helpers record (``loops.Tools`` / ``fan_out``): one order
  looked up over and over, or near-same arguments, or calls failing the same way, against six orders looked
  up once each (in one fan-out, or one a step, each with its own answer);
- the same through ``llmtrace collect`` from agent tool spans other instrumentations write (OTel GenAI
  ``execute_tool`` spans, OpenInference TOOL spans, OpenLLMetry ``@tool`` spans; diagnosis_foreign.py emits
  them after a call with ``tools_run``, inside one agent span per ``turn``);
- a server batch-invariant on purpose: bursts of twelve streams (slower a stream than alone, the setting's
  expected cost) with a timestamp planted at the top of the system prompt; the twin the same bursts, clean.

Greedy answers that differ by the prefix-cache path are not a case here: served as a process, the bundled
SmolLM2 in bfloat16 gave one answer to one story asked 3 and 4 times one at a time (cold prefill, then 32 cached
tokens) in both tries, so no run planted the cause; tests/analyzers/test_analyzers_numerics.py holds the
mechanism where the answers do differ (in-process server), and skips where they agree.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
from typing import Any

from diagnosis_corpus_common import POLICY, Case, Ctx, no_app

HARM_SERVERS: dict[str, list[str]] = {}  # the cases use the corpus's own flag sets

DEPOT = ("You run order support for Kestrel Outdoor. Look an order up before you say where it is, never promise "
         "a delivery date, and offer a refund only for orders lost in transit. Answer in two sentences. ") * 2
ORDERS = ["KO-58112", "KO-58140", "KO-58177", "KO-58203", "KO-58251", "KO-58290", "KO-58314", "KO-58362",
          "KO-58399", "KO-58420", "KO-58466", "KO-58501"]


def _tools(fail: bool = False) -> Any:
    from llmtrace.adapters.helpers import loops

    tools = loops.Tools()

    @tools.register(name="order_status")
    def order_status(order: str) -> dict[str, str]:
        if fail:
            raise TimeoutError("the warehouse API did not answer in 5 s")
        # each order's own answer (its number, as the service spells it): fan-out over distinct arguments gets
        # distinct results; the same answer to every order would be calls that make no progress
        # (diagnosis_corpus_no_progress.py)
        return {"order": "".join(order.split()).upper().replace("--", "-"), "status": "shipped", "carrier": "Parcelnet"}

    return tools


def _turn_ask(c: Ctx, order: str, api: str = "openai") -> None:
    if api == "anthropic":
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=DEPOT, extra_body={"temperature": 0},
                                    messages=[{"role": "user", "content": f"Where is my order {order}?"}])
    else:
        c.ask([{"role": "system", "content": DEPOT}, {"role": "user", "content": f"Where is my order {order}?"}])


def tool_stuck_vs_fan_out(c: Ctx, twin: bool) -> None:
    """Planted: each agent turn asks the model, then looks the customer's one order up five times (a model call
    after each: it never reads the answer). Twin: each turn fans out over six orders at once, once each."""
    from llmtrace.adapters.helpers import loops

    tools = _tools()
    for turn in range(3):
        with loops.agent("orders"):
            _turn_ask(c, ORDERS[turn])
            if twin:
                loops.fan_out([{"name": "order_status", "arguments": {"order": o}} for o in ORDERS[6 * (turn % 2):][:6]],
                              tools.dispatch, max_workers=3)
                _turn_ask(c, "all six")
                continue
            for step in range(5):
                tools.dispatch({"id": f"s{turn}{step}", "name": "order_status", "arguments": {"order": ORDERS[turn]}})
                _turn_ask(c, ORDERS[turn])


def tool_near_same_vs_steps(c: Ctx, twin: bool) -> None:
    """Planted: one order looked up five times a turn, its id in other case and spacing each time
    ("KO-58203", "ko-58203 ", "KO - 58203"...). Twin: six orders looked up one a step (sequential fan-out),
    each answered with its own order: distinct arguments, distinct results, no loop."""
    from llmtrace.adapters.helpers import loops

    tools = _tools()
    for turn in range(3):
        with loops.agent("orders"):
            order = ORDERS[turn + 3]
            forms = [order, order.lower() + " ", f"  {order}", order.replace("-", " - "), order.upper()]
            for step in range(6 if twin else 5):
                arg = ORDERS[(turn * 6 + step) % len(ORDERS)] if twin else forms[step]
                tools.dispatch({"id": f"n{turn}{step}", "name": "order_status", "arguments": {"order": arg}})
                _turn_ask(c, arg, "anthropic")


def tool_same_error_vs_lookups(c: Ctx, twin: bool) -> None:
    """Planted: five orders a turn, each lookup failing with the same timeout (the agent retries with the next
    order and gets nowhere). Twin: the same five lookups, each answered."""
    from llmtrace.adapters.helpers import loops

    tools = _tools(fail=not twin)
    for turn in range(3):
        with loops.agent("orders"):
            for step in range(5):
                try:
                    tools.dispatch({"id": f"e{turn}{step}", "name": "order_status",
                                    "arguments": {"order": ORDERS[(turn + step) % len(ORDERS)]}})
                except TimeoutError:
                    pass
                _turn_ask(c, ORDERS[(turn + step) % len(ORDERS)])


# ── foreign agent spans (diagnosis_foreign.py emits "tools_run" after a call, in the call's "turn") ─────────
def _call(turn: str, order: str, tools_run: list[dict[str, Any]]) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": DEPOT}, {"role": "user", "content": f"Where is {order}?"}],
            "max_tokens": 6, "stream": False, "turn": turn, "tools_run": tools_run}


def foreign_stuck_vs_fan_out(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Planted: each turn looks one order up after every model call, five times (its JSON spaced differently
    each time). Twin: each turn's first call is followed by six lookups over six orders, then an answer."""
    out: list[dict[str, Any]] = []
    for turn in range(3):
        tid = f"t{turn}"
        if twin:
            runs = [{"name": "order_status", "arguments": json.dumps({"order": o}),
                     "result": json.dumps({"order": o, "status": "shipped"})} for o in ORDERS[turn:turn + 6]]
            out += [_call(tid, ORDERS[turn], runs), _call(tid, "the six orders", [])]
            continue
        for step in range(5):
            args = json.dumps({"order": ORDERS[turn]}, indent=step % 3 or None)
            out.append(_call(tid, ORDERS[turn], [{"name": "order_status", "arguments": args,
                                                  "result": json.dumps({"order": ORDERS[turn], "status": "shipped"})}]))
    return out


def foreign_error_vs_lookups(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Planted: five lookups a turn over five orders, each failing with the same error type. Twin: answered."""
    out: list[dict[str, Any]] = []
    for turn in range(3):
        for step in range(5):
            order = ORDERS[(turn + step) % len(ORDERS)]
            run = {"name": "order_status", "arguments": json.dumps({"order": order})}
            run.update({"result": json.dumps({"order": order, "status": "shipped"})} if twin else {"error": "TimeoutError"})
            out.append(_call(f"t{turn}", order, [run]))
    return out


# ── a batch-invariant server: bursts are slower a stream by design ─────────────────────────────────────────
def _burst_system(i: int, planted: bool) -> str:
    now = dt.datetime(2026, 12, 7, 8, 0, 0) + dt.timedelta(seconds=13 * i + 1)
    return (f"Time now: {now:%Y-%m-%d %H:%M:%S}. " if planted else "") + POLICY * 2


def invariant_bursts_clock(c: Ctx, twin: bool) -> None:
    """Planted: on a batch-invariant server, three bursts of twelve streamed answers and a few alone, the request
    time at the top of the system prompt. Twin: the same traffic, the system prompt fixed. The bursts stream
    slower a stream than the lone calls on both: the setting's expected cost, not a finding above info."""
    def one(i: int) -> None:
        stream = c.ask([{"role": "system", "content": _burst_system(i, not twin)},
                        {"role": "user", "content": f"Status of claim C-{400 + i % 12}?"}], max_tokens=24, stream=True)
        for _ in stream:  # read to the end: the stream's pass ends with it
            pass

    for burst in range(3):
        threads = [threading.Thread(target=one, args=(12 * burst + i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(2):
            c.ask([{"role": "system", "content": _burst_system(100 + 2 * burst + k, not twin)},
                   {"role": "user", "content": f"Is claim C-{500 + k} closed?"}], max_tokens=24)


def invariant_bursts_clock_anthropic(c: Ctx, twin: bool) -> None:
    """The same through the Anthropic SDK: the time as an ISO stamp mid-way through the system prompt."""
    def one(i: int) -> None:
        now = dt.datetime(2026, 12, 7, 9, 0, 0) + dt.timedelta(seconds=7 * i + 1)
        system = POLICY + (f"Request received {now.isoformat()}. " if not twin else "") + POLICY
        with c.anthropic.messages.stream(model=c.model, max_tokens=24, system=system, extra_body={"temperature": 0},
                                         messages=[{"role": "user", "content": f"Status of claim C-{600 + i}?"}]) as s:
            for _ in s.text_stream:
                pass

    for burst in range(3):
        threads = [threading.Thread(target=one, args=(12 * burst + i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        one(100 + burst)


HARM_CASES: tuple[Case, ...] = (
    Case("tool_stuck_vs_fan_out", tool_stuck_vs_fan_out, ("loop.tool_dispatch", "loop.budget")),
    Case("tool_near_same_vs_steps", tool_near_same_vs_steps, ("loop.tool_dispatch", "loop.budget")),
    Case("tool_same_error_vs_lookups", tool_same_error_vs_lookups, ("loop.tool_dispatch", "loop.budget")),
    Case("invariant_bursts_clock", invariant_bursts_clock, ("cache.prefix_match", "intake.system_prompt"),
         "invariant", "invariant"),
    Case("invariant_bursts_clock_anthropic", invariant_bursts_clock_anthropic,
         ("cache.prefix_match", "intake.system_prompt"), "invariant", "invariant"),
)


HARM_FOREIGN_CASES: tuple[Case, ...] = (
    Case("otelv2_tool_stuck_vs_fan_out", no_app, ("loop.tool_dispatch", "loop.budget"), via="otel-v2",
         calls=foreign_stuck_vs_fan_out),
    Case("openinference_tool_stuck_vs_fan_out", no_app, ("loop.tool_dispatch", "loop.budget"), via="openinference",
         calls=foreign_stuck_vs_fan_out),
    Case("openllmetry_tool_error_vs_lookups", no_app, ("loop.tool_dispatch", "loop.budget"), via="openllmetry",
         calls=foreign_error_vs_lookups),
)
