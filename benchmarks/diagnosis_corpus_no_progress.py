"""Cases of the diagnosis corpus for issue 35's loops that make no progress, each with its clean twin: calls of one
tool that get back the same result, the same error or nothing, step after step, whatever they ask (other search
words, the next id). A loop, like the same call over and over (``diagnosis_corpus_harm.py``); fan-out (distinct
arguments, distinct results) and calls asked for together in one step (none saw another's result) are not.

- the messages array the app sends back, read by the middleware: OpenAI ``tool`` messages (plain, streamed),
  Anthropic ``tool_result`` blocks (``is_error``, text blocks), results of other phrasings ("0 matches.",
  ``{"error": {...}}``, ``[]``);
- the app helpers' tool spans (``loops.Tools``), a model pass between calls, sync and async;
- the same through ``llmtrace collect``: agent tool spans (OTel GenAI, OpenInference, OpenLLMetry; emitted by
  diagnosis_foreign.py after a call, ``tools_run``) and the input messages the instrumentations record
  (OpenInference, OTel openai-v2, LiteLLM, OpenLLMetry).
Every case in hashes capture.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from diagnosis_corpus_common import Case, Ctx, no_app

EXPECT = ("loop.budget", "loop.tool_dispatch")
LIBRARY = ("You help readers of the Hollin Street library find books. Search the catalogue before you say a book "
           "is held, give the shelf mark from the result, and never reserve a book without the reader's card. ") * 2
FLIGHTS = ("You are the operations desk of Aldmoor regional airport. Look a flight up before you give its gate or "
           "time, never guess a delay, and send passengers with special assistance to desk 4. ") * 2
TITLES = ["The Salt Road", "salt road novel", "Salt Road Hallam", "The Salt Road hardback", "Salt Road 2019"]
FLIGHT_NOS = ["BA0287", "EZY4415", "LS1192", "KL0981", "TOM6623", "FR2204"]
PNRS = ["X7K2Q9", "M4PD8R", "Z9TT1L", "Q2WE5N", "H6JB3C"]


# ── the messages array, read by the middleware ────────────────────────────────────────────────────
def _openai_turn(cid: str, name: str, args: dict[str, Any], result: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": cid, "content": result}]


def _anthropic_turn(cid: str, name: str, args: dict[str, Any], result: str, error: bool) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": name, "input": args}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "is_error": error,
                                          "content": [{"type": "text", "text": result}]}]}]


def catalogue_rephrased_nothing(c: Ctx, twin: bool) -> None:
    """OpenAI: a reader's book searched under five wordings, "0 matches." each time. Twin: five books searched
    once each, each with its own shelf mark."""
    for reader in range(3):
        msgs: list[dict[str, Any]] = [{"role": "system", "content": LIBRARY},
                                      {"role": "user", "content": f"Do you have The Salt Road? card {4410 + reader}"}]
        for step in range(5):
            c.ask(msgs)
            q = f"{TITLES[(reader + step) % 5]} copy {step}" if twin else TITLES[step]
            result = f"1 match: shelf {820 + 7 * step}.{reader} HAL" if twin else "0 matches."
            msgs = msgs + _openai_turn(f"cat{reader}{step}", "catalogue_search", {"query": q}, result)
        c.ask(msgs)


def flight_errors_anthropic(c: Ctx, twin: bool) -> None:
    """Anthropic: the next flight number each step, a ``tool_result`` with ``is_error`` naming it ("Flight EZY4415 is
    not in today's schedule"). Twin: each flight's own gate."""
    for desk in range(3):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Which gate for my connection? desk {desk}"}]
        for step in range(5):
            c.anthropic.messages.create(model=c.model, max_tokens=6, system=FLIGHTS, messages=msgs,
                                        extra_body={"temperature": 0})
            no = FLIGHT_NOS[(desk + step) % len(FLIGHT_NOS)]
            result = f"{no}: gate {12 + step}, boarding 14:{10 * step:02d}" if twin else \
                f"Flight {no} is not in today's schedule"
            msgs = msgs + _anthropic_turn(f"toolu_{desk}{step}", "flight_status", {"flight": no}, result, not twin)
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=FLIGHTS, messages=msgs,
                                    extra_body={"temperature": 0})


def booking_json_errors_stream(c: Ctx, twin: bool) -> None:
    """OpenAI, streamed: the next booking reference each step, a JSON error object naming it. Twin: each
    booking's own JSON record."""
    for agent in range(3):
        msgs: list[dict[str, Any]] = [{"role": "system", "content": FLIGHTS},
                                      {"role": "user", "content": f"Find my booking, surname Okafor {agent}"}]
        for step in range(5):
            for _ in c.ask(msgs, stream=True):
                pass
            pnr = PNRS[(agent + step) % len(PNRS)]
            result = ({"pnr": pnr, "seat": f"{14 + step}C", "status": "ticketed"} if twin else
                      {"error": {"code": 404, "message": f"no booking {pnr}"}})
            msgs = msgs + _openai_turn(f"bk{agent}{step}", "find_booking", {"pnr": pnr}, json.dumps(result))
        c.ask(msgs)


def empty_results_anthropic_stream(c: Ctx, twin: bool) -> None:
    """Anthropic, streamed: a holds search under the next branch each step, ``[]`` each time. Twin: each branch's
    own holds list."""
    branches = ["Hollin Street", "Marsh Lane", "Quarry Hill", "Old Mill", "Riverside"]
    for reader in range(3):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Are my holds ready? card {5120 + reader}"}]
        for step in range(5):
            with c.anthropic.messages.stream(model=c.model, max_tokens=6, system=LIBRARY, messages=msgs,
                                             extra_body={"temperature": 0}) as st:
                "".join(st.text_stream)
            branch = branches[(reader + step) % 5]
            result = json.dumps([{"title": TITLES[step], "branch": branch, "ready": step % 2 == 0}] if twin else [])
            msgs = msgs + _anthropic_turn(f"toolu_h{reader}{step}", "holds_at_branch", {"branch": branch}, result,
                                          False)
        with c.anthropic.messages.stream(model=c.model, max_tokens=6, system=LIBRARY, messages=msgs,
                                         extra_body={"temperature": 0}) as st:
            "".join(st.text_stream)


# ── the app helpers' tool spans ───────────────────────────────────────────────────────────────
def helper_same_answer(c: Ctx, twin: bool) -> None:
    """``loops.Tools``: an address lookup over the next postcode each step, the model asked between; the service
    answers "Address service busy, please try again later" every time. Twin: each postcode's own street."""
    from llmtrace.adapters.helpers import loops

    tools = loops.Tools()

    @tools.register(name="address_lookup", scope="external")
    def address_lookup(postcode: str) -> str:
        return f"{postcode}: 14 Ferry Road, Aldmoor" if twin else "Address service busy, please try again later"

    codes = ["AL1 4QX", "AL2 9RD", "AL3 7BN", "AL4 2HF", "AL5 6KJ", "AL6 1TW"]
    for turn in range(3):
        with loops.agent("delivery"):
            for step in range(5):
                code = codes[(turn + step) % len(codes)]
                c.ask([{"role": "system", "content": FLIGHTS}, {"role": "user", "content": f"Deliver bag to {code}"}])
                tools.dispatch({"id": f"ad{turn}{step}", "name": "address_lookup", "arguments": {"postcode": code}})
            c.ask([{"role": "user", "content": "Confirm the delivery address."}])


def helper_raised_async_anthropic(c: Ctx, twin: bool) -> None:
    """``loops.Tools.adispatch`` (async): a loyalty lookup over the next member number, each raising an error
    that names the number; the model (Anthropic) asked between. Twin: each member's own tier."""
    from llmtrace.adapters.helpers import loops

    tools = loops.Tools()

    @tools.register(name="loyalty_tier")
    async def loyalty_tier(member: str) -> dict[str, str]:
        if not twin:
            raise KeyError(f"member {member} has no loyalty account")
        return {"member": member, "tier": ["silver", "gold", "bronze"][int(member[-1]) % 3]}

    async def turn(k: int) -> None:
        with loops.agent("lounge"):
            for step in range(5):
                member = f"AM{70311 + 17 * (k * 5 + step)}"
                c.anthropic.messages.create(model=c.model, max_tokens=6, system=FLIGHTS, extra_body={"temperature": 0},
                                            messages=[{"role": "user", "content": f"Lounge access for {member}?"}])
                try:
                    await tools.adispatch({"id": f"lt{k}{step}", "name": "loyalty_tier", "input": {"member": member}})
                except KeyError:
                    pass

    for k in range(3):
        asyncio.run(turn(k))


def helper_empty_vs_one_batch(c: Ctx, twin: bool) -> None:
    """``loops.Tools``: a stock check over the next SKU each step, an empty list each time, the model asked
    between. Twin: the same six checks asked for together (one ``fan_out``, the model asked before and after),
    each empty: calls of one step saw none of each other's results."""
    from llmtrace.adapters.helpers import loops

    tools = loops.Tools()

    @tools.register(name="stock_at_gate_shop")
    def stock(sku: str) -> list[dict[str, Any]]:
        return []

    skus = [f"SKU-{9000 + 37 * i}" for i in range(8)]
    for turn in range(3):
        with loops.agent("shop"):
            c.ask([{"role": "user", "content": f"Is the travel adapter in stock? {turn}"}])
            if twin:
                loops.fan_out([{"name": "stock_at_gate_shop", "arguments": {"sku": s}} for s in skus[turn:turn + 6]],
                              tools.dispatch, max_workers=6)
            else:
                for step in range(5):
                    tools.dispatch({"id": f"sk{turn}{step}", "name": "stock_at_gate_shop",
                                    "arguments": {"sku": skus[turn + step]}})
                    c.ask([{"role": "user", "content": f"Check {skus[turn + step]} again?"}])
            c.ask([{"role": "user", "content": "Tell the passenger."}])


NO_PROGRESS_CASES: tuple[Case, ...] = (
    Case("no_progress_catalogue_rephrased", catalogue_rephrased_nothing, EXPECT),
    Case("no_progress_flight_errors_anthropic", flight_errors_anthropic, EXPECT),
    Case("no_progress_booking_json_errors_stream", booking_json_errors_stream, EXPECT),
    Case("no_progress_empty_results_anthropic_stream", empty_results_anthropic_stream, EXPECT),
    Case("no_progress_helper_same_answer", helper_same_answer, EXPECT),
    Case("no_progress_helper_raised_async_anthropic", helper_raised_async_anthropic, EXPECT),
    Case("no_progress_helper_empty_vs_one_batch", helper_empty_vs_one_batch, EXPECT),
)


# ── foreign: agent tool spans, and the input messages the instrumentations record ──────────────────────────
def _call(system: str, user: str, turn: str | None = None, tools_run: list[dict[str, Any]] | None = None,
          messages: list[dict[str, Any]] | None = None, stream: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": messages or [{"role": "system", "content": system},
                                                    {"role": "user", "content": user}],
                           "max_tokens": 6, "stream": stream}
    if turn is not None:
        out.update(turn=turn, tools_run=tools_run or [])
    return out


def _spans(result: Any) -> Any:
    """Calls whose agent runs ``flight_status`` after each model call; ``result(twin, flight, step)`` is its
    result (a dict: {"result": ...} or {"error": ...})."""
    def calls(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
        out = []
        for turn in range(3):
            for step in range(5):
                no = FLIGHT_NOS[(turn + step) % len(FLIGHT_NOS)]
                run = {"name": "flight_status", "arguments": json.dumps({"flight": no}), **result(twin, no, step)}
                out.append(_call(FLIGHTS, f"Gate for {no}?", f"t{turn}", [run]))
        return out
    return calls


same_answer_spans = _spans(lambda twin, no, step: {"result": json.dumps({"flight": no, "gate": 10 + step}) if twin
                                                   else "Schedule feed unavailable, showing cached board"})
error_text_spans = _spans(lambda twin, no, step: {"result": json.dumps({"flight": no, "gate": 10 + step}) if twin
                                                  else json.dumps({"error": f"unknown flight {no}"})})
empty_spans = _spans(lambda twin, no, step: {"result": json.dumps({"flight": no, "gate": 10 + step}) if twin
                                             else "[]"})


def _wire(result: Any) -> Any:
    """Conversations that send back, step after step, the flight lookup's result (``result(twin, flight, step)``)."""
    def calls(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
        out = []
        for desk in range(2):
            msgs: list[dict[str, Any]] = [{"role": "system", "content": FLIGHTS},
                                          {"role": "user", "content": f"Which gate for my connection? desk {desk}"}]
            for step in range(5):
                out.append(_call(FLIGHTS, "", messages=msgs, stream=step % 2 == 1))
                no = FLIGHT_NOS[(desk + step) % len(FLIGHT_NOS)]
                msgs = msgs + _openai_turn(f"call_{desk}_{step}", "flight_status", {"flight": no},
                                           result(twin, no, step))
            out.append(_call(FLIGHTS, "", messages=msgs))
        return out
    return calls


nothing_wire = _wire(lambda twin, no, step: f"{no}: gate {12 + step}" if twin else "No flights found.")
errors_wire = _wire(lambda twin, no, step: f"{no}: gate {12 + step}" if twin else f"Error: flight {no} not found")


NO_PROGRESS_FOREIGN_CASES: tuple[Case, ...] = (
    Case("otelv2_no_progress_same_answer_spans", no_app, EXPECT, via="otel-v2", calls=same_answer_spans),
    Case("openinference_no_progress_error_text_spans", no_app, EXPECT, via="openinference", calls=error_text_spans),
    Case("openllmetry_no_progress_empty_spans", no_app, EXPECT, via="openllmetry", calls=empty_spans),
    Case("openinference_no_progress_nothing_found", no_app, EXPECT, via="openinference", calls=nothing_wire),
    Case("otelv2_no_progress_errors", no_app, EXPECT, via="otel-v2", calls=errors_wire),
    Case("litellm_no_progress_nothing_found", no_app, EXPECT, via="litellm", calls=nothing_wire),
    Case("openllmetry_no_progress_errors", no_app, EXPECT, via="openllmetry", calls=errors_wire),
)
