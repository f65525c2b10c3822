"""Loops are loops: one tool over distinct arguments (six orders looked up once each) is fan-out, the work the
user asked for; the same call over and over (the same or near-same arguments), or calls that keep failing the
same way or getting the same answer whatever they ask, is a loop. Told apart from argument and result digests (no text) recorded by the app helpers
(``loops.Tools.dispatch`` / ``fan_out``) and by ``llmtrace collect`` from foreign ``execute_tool`` spans (OTel
GenAI and OpenInference attributes, sent by the stock OTLP exporter), then ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import Status, StatusCode

import llmtrace
from llmtrace.adapters.helpers import loops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collector"))
from collector_helpers import diagnose_service, otlp_provider, query, start_collector  # noqa: E402

ORDERS = ["A-1041", "B-2277", "C-3310", "D-4198", "E-5023", "F-6604"]


def _loop_findings(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in found if f["stage"].startswith("loop.") and f["severity"] != "info"]


def _middleware(db: Path, kind: str) -> None:
    """Three agent turns, each calling ``order_status`` six times: over six orders (fan-out, in parallel or one
    a step), over one order (a loop; near-same: its id in other case and spacing), or over six orders that all
    fail with the same error (no progress)."""
    tools = loops.Tools()

    @tools.register(name="order_status")
    def order_status(order: str) -> dict[str, str]:
        if kind == "same_error":
            raise TimeoutError("order service did not answer")
        if kind == "fan_out_same_status":  # each order is shipped: the same record, each the answer to its own
            return {"status": "shipped", "carrier": "Parcelnet"}
        if kind == "busy_notice":  # the same notice whatever was asked: no progress
            return {"message": "Order service busy, please try again later"}
        return {"order": order.strip().upper(), "status": "shipped"}

    llmtrace.init(db=db, service_name=f"loops-{kind}", capture="hashes", strict=True)
    try:
        for turn in range(3):
            with loops.agent("orders"):
                if kind == "fan_out":
                    loops.fan_out([{"name": "order_status", "arguments": {"order": o}} for o in ORDERS],
                                  tools.dispatch, max_workers=3)
                    continue
                for step, order in enumerate(ORDERS):
                    if kind in ("fan_out_steps", "fan_out_same_status", "busy_notice"):
                        args = {"order": order}
                    elif kind == "same":
                        args = {"order": ORDERS[turn]}
                    elif kind == "near_same":
                        args = {"order": [ORDERS[turn], ORDERS[turn].lower(), f" {ORDERS[turn]} "][step % 3]}
                    else:
                        args = {"order": order}
                    try:
                        tools.dispatch({"id": f"c{turn}{step}", "name": "order_status", "arguments": args})
                    except TimeoutError:
                        pass
    finally:
        llmtrace.shutdown()


@pytest.mark.parametrize("kind", ["fan_out", "fan_out_steps", "fan_out_same_status", "same", "near_same",
                                  "same_error", "busy_notice"])
def test_middleware_loop_vs_fan_out(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "t.duckdb"
    _middleware(db, kind)
    rows = query(db, "SELECT attributes FROM spans WHERE operation = 'execute_tool'")
    assert len(rows) == 18
    for (attrs,) in rows:
        a = json.loads(str(attrs))
        assert len(a["llmtrace.tool.arguments_hash"]) == 16 and len(a["llmtrace.tool.result_hash"]) == 16, a
        assert not any(o in str(attrs) or o.lower() in str(attrs) for o in ORDERS), attrs  # digests, no text
    found = diagnose_service(db, f"loops-{kind}")
    looped = _loop_findings(found)
    if kind.startswith("fan_out"):
        assert not looped, looped  # six orders looked up once each: the work asked for
        return
    assert looped and looped[0]["stage"] == "loop.tool_dispatch", found
    what = {"same_error": "same error", "busy_notice": "same result"}.get(kind, "same arguments")
    assert what in looped[0]["title"], looped[0]
    calls = next(e for e in looped[0]["evidence"] if e["label"] == "calls that repeated an earlier one")
    assert calls["value"] == 15  # three turns, five repeats each


def _foreign(endpoint: str, service: str, kind: str, shape: str) -> None:
    """An agent's tool spans as another instrumentation writes them: OTel GenAI semconv or OpenInference."""
    tp = otlp_provider(endpoint, service)
    tracer = tp.get_tracer("their-agent")
    for turn in range(2):
        with tracer.start_as_current_span("invoke_agent orders", attributes={"gen_ai.operation.name": "invoke_agent"}):
            for step, order in enumerate(ORDERS):
                arg = ORDERS[turn] if kind == "loop" else order
                args = json.dumps({"order": arg}, indent=step % 2)  # spacing differs call to call
                result = json.dumps({"order": arg, "status": "shipped"})
                if kind == "same_result":  # the same answer to every order: no progress
                    result = "No order matches that number."
                elif kind == "error_text":  # an error returned as the result, naming the order asked
                    result = json.dumps({"error": f"order {arg} is not in the system"})
                if shape == "genai":
                    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "order_status",
                             "gen_ai.tool.call.id": f"call_{turn}_{step}", "gen_ai.tool.call.arguments": args,
                             "gen_ai.tool.call.result": result}
                else:
                    attrs = {"openinference.span.kind": "TOOL", "tool.name": "order_status", "input.value": args,
                             "output.value": result}
                with tracer.start_as_current_span("execute_tool order_status", attributes=attrs) as span:
                    if kind == "error":
                        span.set_status(Status(StatusCode.ERROR, "TimeoutError: order service did not answer"))
                        span.set_attribute("error.type", "TimeoutError")
    tp.shutdown()


def test_foreign_tool_spans_loop_vs_fan_out(tmp_path: Path) -> None:
    col = start_collector(tmp_path, "--capture", "hashes")
    services = {f"{shape}-{kind}": (shape, kind) for shape in ("genai", "openinference")
                for kind in ("fan_out", "loop", "error", "same_result", "error_text")}
    try:
        for service, (shape, kind) in services.items():
            _foreign(col.endpoint, service, kind, shape)
        col.wait_written(len(services) * 14)  # two agent spans and twelve tool spans each
    finally:
        col.stop()
    rows = query(col.db, "SELECT service, attributes FROM spans WHERE operation = 'execute_tool'")
    assert len(rows) == len(services) * 12
    for service, attrs in rows:
        a = json.loads(str(attrs))
        assert a.get("llmtrace.tool.arguments_hash") and a.get("llmtrace.tool.result_hash"), (service, a)
        assert not any(o in str(attrs) for o in ORDERS) and "No order" not in str(attrs), attrs
    for service, (_, kind) in services.items():
        found = diagnose_service(col.db, service)
        looped = _loop_findings(found)
        if kind == "fan_out":
            assert not looped, (service, looped)
            continue
        assert looped and looped[0]["stage"] == "loop.tool_dispatch", (service, found)
        what = {"error": "same error", "error_text": "same error", "same_result": "same result"}.get(kind, "same arguments")
        assert what in looped[0]["title"], (service, looped[0])
