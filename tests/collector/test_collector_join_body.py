"""The join by response id when both sides of a call come in one OTLP request (tracer/collect/
otlp_join_body.py): joined before the rows are stored, the store join records the move and moves the
engine's spans stored before (an earlier request) and after (a later one).

Payloads: the app's OTel GenAI client span (opentelemetry-instrumentation-openai-v2's names,
``gen_ai.response.id``) and vLLM V1's ``llm_request`` (vllm/v1/engine/output_processor.py do_tracing:
``gen_ai.request.id`` = ``chatcmpl-<id>``, ``gen_ai.latency.*`` in ns) with its lifecycle children
(vllm-project/vllm PR 44402: ``vllm_queue``, ``vllm_prefill``, ``vllm_decode``), each encoded by the stock
OTLP encoder and POSTed as one body, as a collector pipeline that batches both services sends them.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from collector_helpers import query, start_collector
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

T0 = 1_780_000_000_000_000_000
MS = 1_000_000


class _Service:
    def __init__(self, name: str) -> None:
        self.exp = InMemorySpanExporter()
        self.tp = TracerProvider(resource=Resource.create({"service.name": name}))
        self.tp.add_span_processor(SimpleSpanProcessor(self.exp))
        self.tracer = self.tp.get_tracer(name)

    def take(self) -> list[Any]:
        spans = list(self.exp.get_finished_spans())
        self.exp.clear()
        return spans


def _post(endpoint: str, spans: list[Any]) -> None:
    body = encode_spans(spans).SerializeToString()
    req = urllib.request.Request(endpoint, data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def _hex(span: Any) -> tuple[str, str]:
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _attrs(db: Path, span_id: str) -> dict[str, Any]:
    rows = query(db, "SELECT attributes FROM spans WHERE span_id = ?", [span_id])
    assert len(rows) == 1, rows
    return json.loads(str(rows[0][0]))


def test_pairs_in_one_request_are_joined_with_the_spans_before_and_after(tmp_path: Path) -> None:
    app, eng = _Service("returns-app"), _Service("vllm")
    col = start_collector(tmp_path)
    try:
        # request 1: an engine child span of the call, ahead of its request span (another export batch)
        root = eng.tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=T0 + MS, attributes={
            "gen_ai.request.id": "chatcmpl-abc", "gen_ai.response.model": "llama", "gen_ai.usage.prompt_tokens": 300,
            "gen_ai.usage.completion_tokens": 30, "gen_ai.latency.time_in_queue": 900 * MS,
            "gen_ai.latency.time_to_first_token": 1200 * MS, "gen_ai.latency.time_in_model_prefill": 280 * MS,
            "gen_ai.latency.time_in_model_decode": 600 * MS, "gen_ai.latency.e2e": 1800 * MS})
        ctx = trace.set_span_in_context(root)
        queue = eng.tracer.start_span("vllm_queue", context=ctx, start_time=T0 + MS)
        queue.end(end_time=T0 + 901 * MS)
        _post(col.endpoint, eng.take())
        col.wait_written(1)
        # request 2: the client's span and the engine's request span, two traces, one body
        client = app.tracer.start_span("chat llama", kind=SpanKind.CLIENT, start_time=T0, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
            "gen_ai.response.id": "chatcmpl-abc", "gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 30})
        prefill = eng.tracer.start_span("vllm_prefill", context=ctx, start_time=T0 + 901 * MS)
        prefill.end(end_time=T0 + 1181 * MS)
        root.end(end_time=T0 + 1801 * MS)
        client.end(end_time=T0 + 1810 * MS)
        # and a pair a traceparent already joined: one trace, both marked done, nothing moved
        c2 = app.tracer.start_span("chat llama", kind=SpanKind.CLIENT, start_time=T0 + 3000 * MS, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
            "gen_ai.response.id": "chatcmpl-same"})
        e2 = eng.tracer.start_span("llm_request", kind=SpanKind.SERVER, context=trace.set_span_in_context(c2),
                                   start_time=T0 + 3001 * MS, attributes={
            "gen_ai.request.id": "chatcmpl-same", "gen_ai.response.model": "llama",
            "gen_ai.latency.time_to_first_token": 100 * MS, "gen_ai.latency.e2e": 200 * MS})
        e2.end(end_time=T0 + 3201 * MS)
        c2.end(end_time=T0 + 3210 * MS)
        _post(col.endpoint, [*app.take(), *eng.take()])
        # request 3: the engine's last child, after its request was joined
        decode = eng.tracer.start_span("vllm_decode", context=ctx, start_time=T0 + 1181 * MS)
        decode.end(end_time=T0 + 1781 * MS)
        _post(col.endpoint, eng.take())
        # 7 spans, and the decode row the request's numbers implied (its queue and prefill spans came first)
        stats = col.wait_written(7 + 1)
        assert stats["traces_joined_by_response_id"] == 1, stats
    finally:
        assert col.stop() == 0
    db = col.db
    c_trace, c_span = _hex(client)
    e_trace, e_span = _hex(root)
    # the engine's whole trace under the client's call: the span before, the pair, the span after
    for span in (queue, prefill, decode):
        assert query(db, "SELECT trace_id FROM spans WHERE span_id = ?", [_hex(span)[1]]) == [(c_trace,)]
    assert query(db, "SELECT trace_id, parent_span_id FROM spans WHERE span_id = ?", [e_span]) == [(c_trace, c_span)]
    assert query(db, "SELECT count(*) FROM spans WHERE trace_id = ?", [e_trace]) == [(0,)]
    marks = _attrs(db, e_span)
    assert marks["llmtrace.join.by"] == "response_id" and marks["llmtrace.join.key"] == "abc"
    assert marks["llmtrace.join.trace_id"] == e_trace and marks["llmtrace.join.parent_span_id"] is None
    assert _attrs(db, c_span)["llmtrace.join.key"] == "abc"
    # one pass with both sides, as the store join's pairs are
    assert query(db, "SELECT observed_by FROM passes WHERE trace_id = ?", [c_trace]) == [("both",)]
    # the traceparent pair: untouched but for the done mark; no key waits for a side it already met
    s_trace, s_span = _hex(e2)
    assert query(db, "SELECT trace_id FROM spans WHERE span_id = ?", [s_span]) == [(_hex(c2)[0],)]
    assert "llmtrace.join.by" not in _attrs(db, s_span) and _attrs(db, s_span)["llmtrace.join.key"] == "same"
    assert query(db, "SELECT count(*) FROM llmtrace_join_keys") == [(0,)]


def test_sglang_request_trace_in_one_request_is_linked_before_it_is_stored(tmp_path: Path) -> None:
    """SGLang's request trace (sglang srt/tracing/trace.py: ``Bootstrap Room`` -> `` Req <rid[:8]>`` (``rid``,
    gen_ai.latency.* in s) -> the scheduler's thread span -> its slices, srt/tracing/req_time_stats.py
    RequestStage) in one body: the slices are the request's stages when stored (otlp_sglang.link_in_body), the
    rows its numbers implied for them dropped; a thread span whose request span is in another body stays
    for the store link, which runs when that request comes."""
    eng = _Service("sglang")
    col = start_collector(tmp_path)

    def request(start: int, rid: str, split: bool) -> tuple[Any, list[Any]]:
        room = eng.tracer.start_span("Bootstrap Room 0x0", start_time=start, attributes={"bootstrap_room": "0x0"})
        req = eng.tracer.start_span(f" Req {rid[:8]}", context=trace.set_span_in_context(room), start_time=start,
                                    attributes={"rid": rid})
        th = eng.tracer.start_span("scheduler [TP 0] (host:5e1f0c2a | pid:4242)", start_time=start,
                                   context=trace.set_span_in_context(req), attributes={"thread_label": "scheduler"})
        slices = []
        for k, (name, ms) in enumerate((("prefill_waiting", 1200), ("prefill_forward", 100), ("decode_loop", 50))):
            s = eng.tracer.start_span(name, context=trace.set_span_in_context(th), start_time=start + k * 10 * MS)
            s.end(end_time=start + (k * 10 + ms) * MS)
            slices.append(s)
        th.end(end_time=start + 1400 * MS)
        if split:  # the scheduler's spans in their own request, before the request span's
            _post(col.endpoint, eng.take())
        req.set_attributes({"gen_ai.latency.time_to_first_token": 1.3, "gen_ai.latency.e2e": 1.4,
                            "gen_ai.latency.time_in_model_prefill": 1.3, "gen_ai.latency.time_in_model_decode": 0.1,
                            "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 5})
        req.end(end_time=start + 1400 * MS)
        room.end(end_time=start + 1400 * MS)
        _post(col.endpoint, eng.take())
        return req, slices

    try:
        whole = request(T0, "a" * 32, split=False)
        split = request(T0 + 5000 * MS, "b" * 32, split=True)
        col.wait_written(2 * (6 + 1))  # 6 spans and the decode row its numbers imply, each
    finally:
        assert col.stop() == 0
    for req, slices in (whole, split):
        req_span = _hex(req)[1]
        rows = query(col.db, "SELECT name, stage FROM spans WHERE parent_span_id = ? AND stage IS NOT NULL "
                             "ORDER BY stage, name", [req_span])
        assert rows == [("prefill_waiting", "arrival.admission"), ("forward.decode", "forward.decode"),
                        ("prefill_forward", "forward.prefill")], rows
        assert query(col.db, "SELECT parent_span_id FROM spans WHERE span_id = ?", [_hex(slices[2])[1]]) != \
            [(req_span,)]  # decode_loop, a step, stays under its thread span
