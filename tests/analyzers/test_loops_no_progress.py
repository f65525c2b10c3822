"""Loops that make no progress: calls of one tool that get back the same result, the same error or nothing, again
and again after the model read it, whatever they asked (other search words, the next order id). A loop like the
same call over and over; fan-out (distinct arguments, distinct results) and calls asked for together (one step:
none saw another's result) are not.

Both ways the middleware sees tool calls, capture "hashes" (digests and counts only, no text kept):
- the app helpers' tool spans (``loops.Tools.dispatch`` inside ``loops.agent``), a model pass between calls
  through the real OpenAI SDK wrapped by ``instrument()``: ``loop.tool_dispatch``;
- the messages array the app sends back (OpenAI ``tool`` messages, Anthropic ``tool_result`` blocks with
  ``is_error``), read by the middleware: ``loop.budget`` (``llmtrace.loop.repeated_tool_results``).
Against the real backend (tiny model), then ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest
from testkit import diagnose_json

from llmtrace.adapters.helpers import loops

ORDERS = ["KO-58112", "KO-58140", "KO-58177", "KO-58203", "KO-58251", "KO-58290"]
QUERIES = ["parcel KO-58112 location", "where is my parcel", "parcel tracking Kestrel", "KO-58112 depot scan",
           "lost parcel Kestrel Outdoor"]
NOTHING = "No results found."
SECRET_WORDS = ("No results", "KO-58", "not in the system", "does not exist", "depot scan", "Parcelnet")


def _loud(found: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f["severity"], f["stage"], f["title"]) for f in found if f["severity"] != "info"]


def _no_text(db: Path) -> None:
    """Hashes mode: none of the tools' arguments or results, nor the conversation's words, is in the store."""
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        rows = conn.execute("SELECT attributes FROM spans").fetchall()
    assert rows
    for (attrs,) in rows:
        assert not any(w in str(attrs) for w in SECRET_WORDS), attrs


# ── the app helpers' tool spans ───────────────────────────────────────────────────────────────
RESULTS: dict[str, Callable[[str], object]] = {
    "same_value": lambda order: NOTHING,  # the same text to every order
    "error_in_result": lambda order: {"error": f"order {order} is not in the system"},
    "empty": lambda order: [],
    "distinct": lambda order: {"order": order, "status": "shipped", "carrier": "Parcelnet"},
}


def _helpers(db: Path, kind: str) -> None:
    """Three agent turns; in each the model is asked, then ``order_status`` runs on the next order, the model asked
    again, five times (one a step). ``raised``: each lookup raises an error naming its order. ``batch``: the
    model asked once, then the six lookups at once (one fan-out), each answered alike, then an answer."""
    tools = loops.Tools()

    @tools.register(name="order_status")
    def order_status(order: str) -> object:
        if kind == "raised":
            raise LookupError(f"order {order} does not exist")
        return RESULTS.get(kind, RESULTS["same_value"])(order)

    srv = live.server()
    with live.store(db, capture="hashes"):
        c = live.client(srv)

        def ask(what: str) -> None:
            c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"Where is {what}?"}],
                                      max_tokens=3, temperature=0)

        for turn in range(3):
            with loops.agent("orders"):
                ask(f"order {turn}")
                if kind == "batch":
                    loops.fan_out([{"name": "order_status", "arguments": {"order": o}} for o in ORDERS],
                                  tools.dispatch, max_workers=6)
                    ask("the six orders")
                    continue
                for step in range(5):
                    order = ORDERS[(turn + step) % len(ORDERS)]
                    try:
                        tools.dispatch({"id": f"c{turn}{step}", "name": "order_status", "arguments": {"order": order}})
                    except LookupError:
                        pass
                    ask(order)


@pytest.mark.parametrize(("kind", "what"), [("same_value", "same result"), ("error_in_result", "same error"),
                                            ("raised", "same error"), ("empty", "same result")])
def test_helper_calls_that_get_nowhere_are_a_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
                                                  what: str) -> None:
    db = tmp_path / "t.duckdb"
    _helpers(db, kind)
    _no_text(db)
    found = diagnose_json(db, capsys)
    loud = _loud(found)
    assert loud and loud[0][1] == "loop.tool_dispatch", found
    assert what in loud[0][2], loud[0]
    top = next(f for f in found if f["stage"] == "loop.tool_dispatch")
    calls = next(e for e in top["evidence"] if e["label"] == "calls that repeated an earlier one")
    assert calls["value"] == 12  # three turns, four calls each after the first had come back


@pytest.mark.parametrize("kind", ["distinct", "batch"])
def test_helper_fan_out_is_no_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    db = tmp_path / "t.duckdb"
    _helpers(db, kind)
    assert not [x for x in _loud(diagnose_json(db, capsys)) if x[1].startswith("loop.")]


# ── the messages array the app sends back ─────────────────────────────────────────────────────────
def _openai_turn(cid: str, calls: list[tuple[str, dict[str, str]]], results: list[str]) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"{cid}_{k}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for k, (n, a) in enumerate(calls)]},
            *[{"role": "tool", "tool_call_id": f"{cid}_{k}", "content": r} for k, r in enumerate(results)]]


def _anthropic_turn(cid: str, calls: list[tuple[str, dict[str, str]]], results: list[str],
                    error: bool) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": f"{cid}_{k}", "name": n, "input": a}
                                              for k, (n, a) in enumerate(calls)]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"{cid}_{k}", "is_error": error,
                                          "content": [{"type": "text", "text": r}]} for k, r in enumerate(results)]}]


def _wire(db: Path, api: str, kind: str) -> None:
    """Three conversations of five steps. ``nothing``: a search under other words each step, "No results found."
    each time. ``error``: the next order each step, an error naming it (Anthropic: ``is_error``; OpenAI: text
    that opens with "Error:"). ``distinct``: the next order each step, its own status. ``one_step``: five
    lookups asked for together in one step, each answered alike, then an answer."""
    import anthropic

    from llmtrace.adapters import instrument

    srv = live.server()
    with live.store(db, capture="hashes"):
        oc = live.client(srv)
        ac = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))
        for run in range(3):
            msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Where is my parcel? account {run}"}]
            steps = 1 if kind == "one_step" else 5
            for step in range(steps):
                if api == "openai":
                    oc.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0)
                else:
                    ac.messages.create(model="tiny", messages=msgs, max_tokens=3, extra_body={"temperature": 0})
                order = ORDERS[(run + step) % len(ORDERS)]
                if kind == "nothing":
                    calls, results = [("search", {"q": QUERIES[step]})], [NOTHING]
                elif kind == "one_step":
                    calls, results = [("order_status", {"order": o}) for o in ORDERS[:5]], ["shipped"] * 5
                elif kind == "error":
                    calls = [("order_status", {"order": order})]
                    results = [f"Order {order} does not exist" if api == "anthropic" else f"Error: order {order} does not exist"]
                else:
                    calls, results = [("order_status", {"order": order})], [f"{order}: shipped via Parcelnet"]
                cid = f"r{run}s{step}"
                msgs = msgs + (_openai_turn(cid, calls, results) if api == "openai"
                               else _anthropic_turn(cid, calls, results, kind == "error"))
            if api == "openai":
                oc.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0)
            else:
                ac.messages.create(model="tiny", messages=msgs, max_tokens=3, extra_body={"temperature": 0})


@pytest.mark.parametrize(("api", "kind"), [("openai", "nothing"), ("anthropic", "nothing"), ("openai", "error"),
                                           ("anthropic", "error")])
def test_the_same_result_sent_back_again_and_again_is_a_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             api: str, kind: str) -> None:
    db = tmp_path / "t.duckdb"
    _wire(db, api, kind)
    _no_text(db)
    found = diagnose_json(db, capsys)
    loud = _loud(found)
    assert loud and loud[0][1] == "loop.budget", found
    assert loud[0][2].startswith("3 agent runs"), loud[0]
    no_progress = [e for e in found[0]["evidence"] if e["label"].startswith("calls that got back the same result")]
    assert no_progress and no_progress[0]["value"] == 4, found[0]["evidence"]  # five steps: four got it again


@pytest.mark.parametrize(("api", "kind"), [("openai", "distinct"), ("anthropic", "distinct"), ("openai", "one_step"),
                                           ("anthropic", "one_step")])
def test_distinct_lookups_and_one_step_are_no_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str], api: str,
                                                   kind: str) -> None:
    db = tmp_path / "t.duckdb"
    _wire(db, api, kind)
    assert not [x for x in _loud(diagnose_json(db, capsys)) if x[1].startswith("loop.")]
