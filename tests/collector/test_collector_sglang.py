"""SGLang's per-request slices mapped to stages through a real ``llmtrace collect`` (the stock OTLP/HTTP
exporter), in the shape SGLang itself writes them (sglang srt/tracing/trace.py and req_time_stats.py
RequestStage; docs/references/production_request_trace.md): ``Bootstrap Room 0x0`` -> `` Req <rid[:8]>``
(``rid``; ``gen_ai.latency.*`` in seconds set at finish, ``time_in_model_prefill`` from dispatch to the first
token) -> a thread span a process (``tokenizer``, ``scheduler [TP 0] (host:.. | pid:..)``) -> its slices
(``tokenize``, ``dispatch``; ``request_process``, ``prefill_waiting``, ``prefill_forward``, one
``decode_loop`` a step). The tokenizer and the scheduler are two processes with two exporters: half the
requests' scheduler spans are exported before the request span, half after.

6 of 8 requests wait 1.2 s for their first forward: the wait is the pass's arrival.admission row (under the
request span, as the analyzers read stages), the prefill forward its forward.prefill row in place of the
one the request's numbers implied (which held the wait too), and ``llmtrace diagnose`` names the queue; a
twin that never waits stays quiet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from collector_helpers import diagnose_services, otlp_provider, query, start_collector
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

T0 = 1_780_000_000_000_000_000
MS = 1_000_000


def _slices(tp: TracerProvider, parent: Any, label: str, start: int, slices: list[tuple[str, int, int]]) -> None:
    t = tp.get_tracer("sglang server")
    th = t.start_span(f"{label} (host:5e1f0c2a | pid:4242)", context=trace.set_span_in_context(parent),
                      start_time=start, attributes={"host_id": "5e1f0c2a", "pid": 4242, "thread_label": label})
    for name, a, b in slices:
        t.start_span(name, context=trace.set_span_in_context(th), start_time=start + a * MS).end(end_time=start + b * MS)
    th.end(end_time=start + slices[-1][2] * MS)


def _request(tok: TracerProvider, sched: TracerProvider, i: int, wait_ms: int) -> str:
    """One request: the tokenizer's spans, the scheduler's, the request span's numbers at finish."""
    t = tok.get_tracer("sglang server")
    start = T0 + i * 3000 * MS
    rid = f"{i:04x}9d8e4f60a1b2c3d4e5f60718aaaa"
    room = t.start_span("Bootstrap Room 0x0", start_time=start, attributes={"bootstrap_room": "0x0"})
    req = t.start_span(f" Req {rid[:8]}", context=trace.set_span_in_context(room), start_time=start,
                       attributes={"rid": rid})
    _slices(tok, req, "tokenizer", start, [("tokenize", 0, 5), ("dispatch", 5, 6)])
    w = wait_ms
    steps = [("request_process", 6, 7), ("prefill_waiting", 7, 7 + w), ("prefill_forward", 7 + w, 107 + w)]
    steps += [("decode_loop", 107 + w + 20 * k, 127 + w + 20 * k) for k in range(10)]
    sched_first = i % 2 == 0
    if sched_first:
        _slices(sched, req, "scheduler [TP 0]", start, steps)
        sched.force_flush()
    end = start + (310 + w) * MS
    req.set_attributes({"gen_ai.latency.time_to_first_token": (107 + w - 6) / 1000 + 0.006,
                        "gen_ai.latency.e2e": (310 + w) / 1000, "gen_ai.latency.time_in_model_prefill": (101 + w) / 1000,
                        "gen_ai.latency.time_in_model_decode": 0.2, "gen_ai.usage.prompt_tokens": 400,
                        "gen_ai.usage.completion_tokens": 11})
    req.end(end_time=end)
    room.end(end_time=end)
    tok.force_flush()
    if not sched_first:
        _slices(sched, req, "scheduler [TP 0]", start, steps)
        sched.force_flush()
    return f"{req.get_span_context().trace_id:032x}"


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sglang")
    col = start_collector(tmp)
    traces: dict[str, list[str]] = {}
    try:
        for service, waits in (("sglang", [1200 if i % 4 else 0 for i in range(8)]), ("sglang-twin", [0] * 8)):
            tok, sched = otlp_provider(col.endpoint, service), otlp_provider(col.endpoint, service)
            traces[service] = [_request(tok, sched, i, w) for i, w in enumerate(waits)]
            tok.shutdown()
            sched.shutdown()
        # a request: 2 + 3 (tokenizer) + 14 (scheduler) spans + the decode row its numbers imply (the prefill
        # row they imply is dropped for the slice's): 20 rows
        col.wait_written(16 * 20 + 16, timeout_s=60)
    finally:
        assert col.stop() == 0, col.log()
    return {"db": col.db, "traces": traces, "findings": diagnose_services(col.db, ["sglang", "sglang-twin"])}


def _stages(db: Path, trace_id: str) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """The trace's stage rows under its pass span: stage -> [(name, parent, attributes)]."""
    rows = query(db, """SELECT s.stage, s.name, s.parent_span_id, s.attributes FROM spans s JOIN spans p
                        ON p.trace_id = s.trace_id AND p.span_id = s.parent_span_id AND p.operation IS NOT NULL
                        WHERE s.trace_id = ? AND s.stage IS NOT NULL""", [trace_id])
    out: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for stage, name, parent, attrs in rows:
        out.setdefault(str(stage), []).append((str(name), str(parent), json.loads(str(attrs))))
    return out


def test_slices_are_the_pass_stages(sglang: dict[str, Any]) -> None:
    db = sglang["db"]
    for i, trace_id in enumerate(sglang["traces"]["sglang"]):
        st = _stages(db, trace_id)
        wait = 1200.0 if i % 4 else 0.0
        (adm,) = st["arrival.admission"]
        assert adm[0] == "prefill_waiting" and adm[2]["llmtrace.admission.queue_wait_ms"] == pytest.approx(wait)
        (pre,) = st["forward.prefill"]  # the slice's, not the one the numbers implied (which held the wait)
        assert pre[0] == "prefill_forward" and pre[2]["llmtrace.prefill.ms"] == pytest.approx(100.0)
        assert [r[0] for r in st["forward.decode"]] == ["forward.decode"]  # from the numbers: one row, not a step's
        assert adm[2]["llmtrace.mapped_from"] == "sglang"
    # the pass itself is SGLang's, read from the request span's numbers in seconds
    rows = query(db, "SELECT attributes FROM spans WHERE trace_id = ? AND operation IS NOT NULL",
                 [sglang["traces"]["sglang"][1]])
    attrs = json.loads(str(rows[0][0]))
    assert attrs["gen_ai.provider.name"] == "sglang" and attrs["llmtrace.latency.unit"] == "s"


def test_diagnose_names_sglangs_queue(sglang: dict[str, Any]) -> None:
    found = sglang["findings"]["sglang"]
    assert found and found[0]["stage"] == "arrival.admission", [(f["stage"], f["title"]) for f in found[:3]]
    assert set(found[0]["trace_ids"]) <= set(sglang["traces"]["sglang"])
    twin = sglang["findings"]["sglang-twin"]
    assert not any(f["severity"] != "info" for f in twin), [(f["stage"], f["title"]) for f in twin[:3]]
