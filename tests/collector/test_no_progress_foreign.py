"""Loops that make no progress, read off the input messages foreign instrumentations record (what the middleware
reads off the messages array): an agent that searches under other words each step and gets "No results found."
each time, or looks up the next order each step and gets an error naming it, is a loop (``loop.budget``,
``llmtrace.loop.repeated_tool_results``); its clean twin (a lookup per order, each with its own answer, and five
lookups asked for together in one step, answered alike) raises nothing. OpenInference, OpenLLMetry, the OTel
GenAI openai-v2 instrumentation and LiteLLM's ``otel`` callback, each in an app of its own exporting through the
stock OTLP exporter to the real ``llmtrace collect`` (capture hashes), against the real ``llmtrace serve``;
``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from collector_helpers import (
    ForeignApp,
    RunningCollector,
    diagnose_services,
    query,
    send_foreign,
    start_collector,
)
from testkit import RunningServer

DESK = ("You answer for Kestrel Outdoor's parcel desk. Look a parcel up before you say where it is and never "
        "promise a delivery date. ") * 2
APPS = ("openinference", "openllmetry", "otel-v2", "litellm")
ERROR_APPS = ("openinference", "litellm")
ORDERS = ["KO-58112", "KO-58140", "KO-58177", "KO-58203", "KO-58251", "KO-58290"]
QUERIES = ["parcel KO-58112 location", "where is my parcel", "parcel tracking Kestrel", "KO-58112 depot scan",
           "lost parcel Kestrel Outdoor"]


def _turn(cid: str, calls: list[tuple[str, dict[str, str]]], results: list[str]) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"{cid}_{k}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for k, (n, a) in enumerate(calls)]},
            *[{"role": "tool", "tool_call_id": f"{cid}_{k}", "content": r} for k, r in enumerate(results)]]


def _agent(kind: str) -> list[dict[str, Any]]:
    """Two conversations of five steps each (``clean``: one of distinct lookups, one of a single step)."""
    out: list[dict[str, Any]] = []
    for run in range(2):
        msgs: list[dict[str, Any]] = [{"role": "system", "content": DESK},
                                      {"role": "user", "content": f"Where is my parcel? account {run}"}]
        one_step = kind == "clean" and run == 1
        for step in range(1 if one_step else 5):
            out.append({"messages": msgs, "max_tokens": 3, "stream": step % 2 == 1})
            order = ORDERS[(run + step) % len(ORDERS)]
            if kind == "nothing":
                calls, results = [("search", {"q": QUERIES[step]})], ["No results found."]
            elif kind == "error":
                calls, results = [("order_status", {"order": order})], [f"Error: order {order} does not exist"]
            elif one_step:
                calls, results = [("order_status", {"order": o}) for o in ORDERS[:5]], ["shipped"] * 5
            else:
                calls, results = [("order_status", {"order": order})], [f"{order}: shipped via Parcelnet"]
            msgs = msgs + _turn(f"r{run}s{step}", calls, results)
        out.append({"messages": msgs, "max_tokens": 3})
    return out


@pytest.fixture(scope="module")
def found(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("no-progress-foreign")
    col: RunningCollector = start_collector(tmp, "--capture", "hashes")
    try:
        apps = {f"{kind}-{app}": ForeignApp(app, _agent(kind)) for app in APPS for kind in ("nothing", "clean")}
        apps.update({f"error-{app}": ForeignApp(app, _agent("error")) for app in ERROR_APPS})
        send_foreign(col, tmp, tiny_server.base_url + "/v1", apps)
        yield {"findings": diagnose_services(col.db, list(apps)), "db": col.db}
    finally:
        col.stop()


def _loud(found: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f["severity"], f["stage"], f["title"]) for f in found if f["severity"] != "info"]


@pytest.mark.parametrize("service", [f"nothing-{a}" for a in APPS] + [f"error-{a}" for a in ERROR_APPS])
def test_the_same_result_again_and_again_is_a_loop(found: dict[str, Any], service: str) -> None:
    mine = found["findings"][service]
    loud = _loud(mine)
    assert loud and loud[0][1] == "loop.budget", mine
    budget = next(f for f in mine if f["stage"] == "loop.budget")
    no_progress = [e for e in budget["evidence"] if e["label"].startswith("calls that got back the same result")]
    assert no_progress and no_progress[0]["value"] == 4, budget["evidence"]  # five steps: four got it again


@pytest.mark.parametrize("app", APPS)
def test_the_clean_twin_raises_nothing(found: dict[str, Any], app: str) -> None:
    assert not _loud(found["findings"][f"clean-{app}"]), found["findings"][f"clean-{app}"]


def test_hashes_mode_keeps_no_text(found: dict[str, Any]) -> None:
    rows = query(found["db"], "SELECT attributes FROM spans")
    assert rows
    for (attrs,) in rows:
        assert not any(w in str(attrs) for w in ("No results", "KO-58", "does not exist", "Parcelnet")), attrs
