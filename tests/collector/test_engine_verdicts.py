"""Same verdicts on engines' traces: what `llmtrace diagnose` says of our own spans it says of vLLM's, llm-d's
and Dynamo's, sent through the stock OTLP/HTTP exporter into `llmtrace collect` (each case beside a twin
that must stay quiet).

- llm-d's router (llm-d/llm-d-router; keys of pkg/common/observability/semconv/llm_d.go):
  produce_precise_prefix_cache's llm_d.epp.producer.max_match_blocks / total_blocks (.../dataproducer/
  preciseprefixcache/producer.go), score_tokens' llm_d.kv_cache.token_count / block_keys.count
  (pkg/kvcache/indexer.go), run_scheduler_profile -> llm_d.epp.scoring, llm_d.epp.scorer.<type> and
  pick_endpoints' llm_d.epp.picker.top_endpoints (pkg/epp/scheduling/scheduler.go, scheduler_profile.go)
  sends 6 of 8 requests to a replica whose engine then reused none of the prefix while another held 30 of
  40 blocks: arrival.replica_selection;
- vLLM V1 (vllm-project/vllm PR 44402's vllm_queue child span, gen_ai.latency.* in ns) holds 6 of 8
  requests 1.5 s in its queue: arrival.admission;
- an app's OTel GenAI client spans (gen_ai.input.messages) with a request id at the top of the system
  prompt, joined by traceparent to vLLM's llm_request, the engine's cached tokens 0: the volatile field;
- Dynamo's router.route_request (lib/runtime/src/pipeline/network/egress/push_router.rs: request_id,
  worker_id, router_mode) over engine.generate (disagg_role, model, input_tokens: tests/frontend/
  test_unified_worker_otlp_export.py; output_tokens, finish_reason: ai-dynamo/dynamo PR 9543) ending 6 of 8
  answers on ``finish_reason=length``: truncation, at gen.stop.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from collector_helpers import diagnose_services, otlp_provider, start_collector
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

T0 = 1_780_000_000_000_000_000
MS = 1_000_000
PROP = TraceContextTextMapPropagator()
SYSTEM = ("You are the returns desk of the Copperfield outdoor shop. Accept returns within sixty days with a "
          "receipt, offer store credit without one, never promise a refund to a card that was not used for the "
          "purchase, and ask for the order number before anything else. Keep answers to three sentences. ") * 4


def _llmd(tp: Any, i: int, away: bool) -> None:
    """One request: the app's client span, llm-d's router spans (its own attribute keys), the vLLM engine's
    span. The chosen endpoint's match is what the engine reused: the cached tokens the app was told."""
    app, t = tp.get_tracer("opentelemetry.instrumentation.openai_v2"), tp.get_tracer("llm-d-inference-scheduler")
    start = T0 + i * 2000 * MS
    client = app.start_span("chat llama", kind=SpanKind.CLIENT, start_time=start, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
        "gen_ai.usage.input_tokens": 640, "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 0 if away else 480})
    gw = t.start_span("gateway.request_orchestration", context=trace.set_span_in_context(client), start_time=start)
    ctx = trace.set_span_in_context(gw)
    run = t.start_span("run_scheduler_profile", context=ctx, start_time=start + MS,
                       attributes={"llm_d.epp.scheduling.profile.name": "default"})
    for name, attrs, parent in (
            ("score_tokens", {"llm_d.kv_cache.token_count": 640, "llm_d.kv_cache.block_keys.count": 40}, ctx),
            ("produce_precise_prefix_cache", {"llm_d.epp.producer.total_blocks": 40,
                                              "llm_d.epp.producer.max_match_blocks": 30}, ctx),
            ("llm_d.epp.scoring", {"llm_d.epp.scorer.count": 1, "llm_d.epp.scoring.candidate_endpoints": 3}, None),
            ("llm_d.epp.scorer.precise-prefix-cache-scorer", {"llm_d.epp.scorer.type": "precise-prefix-cache-scorer"},
             None),
            ("pick_endpoints", {"llm_d.epp.picker.top_endpoints": ["pod-b" if away else "pod-a"],
                                "llm_d.epp.picker.candidate_endpoints": 3}, None)):
        s = t.start_span(name, context=parent or trace.set_span_in_context(run), start_time=start + MS)
        s.set_attributes({**attrs, "gen_ai.request.id": f"llmd-{i}"})
        s.end(end_time=start + 2 * MS)
    run.end(end_time=start + 2 * MS)
    s = t.start_span("llm_request", kind=SpanKind.SERVER, context=ctx, start_time=start + 3 * MS, attributes={
        "gen_ai.response.model": "llama", "gen_ai.usage.prompt_tokens": 640, "gen_ai.usage.completion_tokens": 20,
        "gen_ai.latency.time_in_queue": 0.0, "gen_ai.latency.time_to_first_token": 0.9 if away else 0.15,
        "gen_ai.latency.time_in_model_prefill": 0.85 if away else 0.1, "gen_ai.latency.time_in_model_decode": 0.4,
        "gen_ai.latency.e2e": 1.3 if away else 0.55})
    s.end(end_time=start + (1300 if away else 550) * MS)
    gw.end(end_time=start + 1400 * MS)
    client.end(end_time=start + 1401 * MS)


def _v1_queue(tp: Any, i: int, queued: bool) -> None:
    t = tp.get_tracer("vllm.llm_engine")
    start = T0 + i * 3000 * MS
    q_ms = 1500 if queued else 0
    root = t.start_span("llm_request", kind=SpanKind.SERVER, start_time=start, attributes={
        "gen_ai.response.model": "llama", "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 30,
        "gen_ai.latency.time_in_queue": q_ms * MS, "gen_ai.latency.time_to_first_token": (q_ms + 300) * MS,
        "gen_ai.latency.time_in_model_prefill": 280 * MS, "gen_ai.latency.time_in_model_decode": 600 * MS,
        "gen_ai.latency.e2e": (q_ms + 900) * MS})
    ctx = trace.set_span_in_context(root)
    for name, a, b in (("vllm_queue", 0, q_ms), ("vllm_prefill", q_ms, q_ms + 280), ("vllm_decode", q_ms + 300,
                                                                                     q_ms + 900)):
        s = t.start_span(name, context=ctx, start_time=start + a * MS)
        s.end(end_time=start + b * MS)
    root.end(end_time=start + (q_ms + 900) * MS)


def _volatile(app_tp: Any, eng_tp: Any, i: int, volatile: bool) -> None:
    app, eng = app_tp.get_tracer("opentelemetry.instrumentation.openai_v2"), eng_tp.get_tracer("vllm.llm_engine")
    start = T0 + i * 2000 * MS
    head = f"request_id: {uuid.UUID(int=i * 7919 + 13)}\n" if volatile else ""
    msgs = [{"role": "system", "parts": [{"type": "text", "content": head + SYSTEM}]},
            {"role": "user", "parts": [{"type": "text", "content": f"Can I return order {1000 + i}?"}]}]
    cached = 0 if volatile else 576
    client = app.start_span("chat llama", kind=SpanKind.CLIENT, start_time=start, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
        "gen_ai.usage.input_tokens": 640, "gen_ai.usage.output_tokens": 12,
        "gen_ai.usage.cache_read.input_tokens": cached, "server.address": "vllm.internal",
        "gen_ai.input.messages": json.dumps(msgs), "gen_ai.response.finish_reasons": ["stop"]})
    headers: dict[str, str] = {}
    PROP.inject(headers, context=trace.set_span_in_context(client))
    prefill = 0.6 if volatile else 0.06
    s = eng.start_span("llm_request", kind=SpanKind.SERVER, context=PROP.extract(headers), start_time=start + MS,
                       attributes={"gen_ai.response.model": "llama", "gen_ai.usage.prompt_tokens": 640,
                                   "gen_ai.usage.completion_tokens": 12, "gen_ai.latency.time_in_queue": 0.0,
                                   "gen_ai.latency.time_to_first_token": prefill + 0.02,
                                   "gen_ai.latency.time_in_model_prefill": prefill,
                                   "gen_ai.latency.time_in_model_decode": 0.2, "gen_ai.latency.e2e": prefill + 0.22})
    s.end(end_time=start + MS + int((prefill + 0.22) * 1000) * MS)
    client.end(end_time=start + int((prefill + 0.25) * 1000) * MS)


def _dynamo(tp: Any, i: int, cut: bool) -> None:
    t = tp.get_tracer("dynamo.worker")
    start = T0 + i * 2000 * MS
    route = t.start_span("router.route_request", kind=SpanKind.CLIENT, start_time=start, attributes={
        "request_id": f"dyn-{i}", "worker_id": 7587890, "router_mode": "RoundRobin", "request.attempt": 0})
    s = t.start_span("engine.generate", context=trace.set_span_in_context(route), start_time=start + MS,
                     attributes={"disagg_role": "decode", "model": "llama", "input_tokens": 300, "ttft_ms": 80.0,
                                 "output_tokens": 256 if cut else 90, "finish_reason": "length" if cut else "stop"})
    s.end(end_time=start + 900 * MS)
    route.end(end_time=start + 901 * MS)


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("verdicts")
    col = start_collector(tmp)
    services: list[str] = []
    try:
        for twin in (False, True):
            sfx = "-twin" if twin else ""
            tp = otlp_provider(col.endpoint, "llmd" + sfx)
            for i in range(8):
                _llmd(tp, i, away=not twin and i % 4 != 0)
            tp.shutdown()
            tp = otlp_provider(col.endpoint, "v1queue" + sfx)
            for i in range(8):
                _v1_queue(tp, i, queued=not twin and i % 4 != 0)
            tp.shutdown()
            app_tp, eng_tp = otlp_provider(col.endpoint, "returns" + sfx), otlp_provider(col.endpoint, "returns" + sfx)
            for i in range(8):
                _volatile(app_tp, eng_tp, i, volatile=not twin)
            app_tp.shutdown()
            eng_tp.shutdown()
            tp = otlp_provider(col.endpoint, "dynamo" + sfx)
            for i in range(8):
                _dynamo(tp, i, cut=not twin and i % 4 != 0)
            tp.shutdown()
            services += ["llmd" + sfx, "v1queue" + sfx, "returns" + sfx, "dynamo" + sfx]
        # llm-d: 8 x (9 spans + 3 rows); v1: 8 x 4 spans; returns: 8 x (2 spans + 3 rows); dynamo: 8 x 2 spans;
        # and the twins
        col.wait_written(2 * (8 * 12 + 8 * 4 + 8 * 5 + 8 * 2), timeout_s=60)
    finally:
        assert col.stop() == 0
    return diagnose_services(col.db, services)


def _top(found: list[dict[str, Any]]) -> str | None:
    return found[0]["stage"] if found else None


def test_router_sending_requests_away_from_their_prefix(findings: dict[str, list[dict[str, Any]]]) -> None:
    found = findings["llmd"]
    assert _top(found) == "arrival.replica_selection", found[:3]
    top = found[0]
    assert "6 of 8" in top["title"]
    ev = {e["label"]: e["value"] for e in top["evidence"]}
    assert ev["prefix blocks resident elsewhere, computed again"] == 180  # 6 x (30 best - 0 reused / 16)
    assert not any(f["stage"] == "arrival.replica_selection" for f in findings["llmd-twin"])


def test_queue_in_vllm_v1(findings: dict[str, list[dict[str, Any]]]) -> None:
    assert _top(findings["v1queue"]) == "arrival.admission", findings["v1queue"][:3]
    assert not any(f["severity"] != "info" for f in findings["v1queue-twin"]), findings["v1queue-twin"][:3]


def test_volatile_field_zeroes_the_engines_hit(findings: dict[str, list[dict[str, Any]]]) -> None:
    found = findings["returns"]
    assert found and found[0]["stage"] in ("intake.system_prompt", "cache.prefix_match"), found[:3]
    assert not any(f["severity"] != "info" for f in findings["returns-twin"]), findings["returns-twin"][:3]


def test_truncation_in_dynamo(findings: dict[str, list[dict[str, Any]]]) -> None:
    cut = [f for f in findings["dynamo"] if f["stage"] == "gen.stop"]
    assert cut, findings["dynamo"][:3]
    assert not any(f["stage"] == "gen.stop" for f in findings["dynamo-twin"]), findings["dynamo-twin"][:3]
