"""The engines' block of the diagnosis corpus: inference engines' and routers' own spans (vLLM V1's lifecycle
spans, SGLang's request span and its request trace's slices, llm-d's router, Dynamo's router and
engine.generate, an app's OTel GenAI client spans joined to vLLM's by traceparent, and by response id where
no traceparent reached vLLM), sent by the stock OTLP/HTTP exporter to a `llmtrace collect` of
their own; `diagnose` reads only what those shapes carry. No server runs: the spans are what those projects
emit (their attribute names; sources in tests/collector/test_collector_engines.py), the numbers the case's.

Each case has a twin with the cause removed. Other domains and numbers than the tests: a travel desk, a
legal-research assistant, a code reviewer; 10 requests, 7 affected.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

MS = 1_000_000
N_REQUESTS = 10
PROP = TraceContextTextMapPropagator()
Emit = Callable[[Any, int, int, bool, random.Random], int]  # (tracer provider, request, start ns, twin) -> rows


@dataclass(frozen=True, slots=True)
class EngineCase:
    id: str
    expect: tuple[str, ...]
    emit: Emit
    via: str  # the shape, as the results name it
    apps: int = 1  # tracer providers (services' processes) the case's spans come from


def _affected(i: int, twin: bool) -> bool:
    return not twin and i % 10 not in (0, 5, 8)  # 7 of 10


def llmd_router(tp_pair: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """llm-d (its telemetry semconv keys): the precise-prefix-cache producer saw 52 of 64 blocks on the
    best pod; the picker (load weighed above prefix) sent the request to another, whose engine then reused a
    few blocks at most (the cached tokens the app was told)."""
    app_tp, eng_tp = tp_pair
    app, t = app_tp.get_tracer("opentelemetry.instrumentation.openai_v2"), eng_tp.get_tracer("llm-d-router")
    away = _affected(i, twin)
    cached = 16 * (rng.randint(0, 4) if away else 52)
    client = app.start_span("chat granite-8b", kind=SpanKind.CLIENT, start_time=t0, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "granite-8b",
        "gen_ai.usage.input_tokens": 1024, "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": cached})
    headers: dict[str, str] = {}
    PROP.inject(headers, context=trace.set_span_in_context(client))
    gw = t.start_span("gateway.request_orchestration", kind=SpanKind.SERVER, context=PROP.extract(headers),
                      start_time=t0)
    ctx = trace.set_span_in_context(gw)
    for name, attrs in (("produce_precise_prefix_cache", {"llm_d.epp.producer.total_blocks": 64,
                                                          "llm_d.epp.producer.max_match_blocks": 52,
                                                          "llm_d.epp.producer.candidate_endpoints": 5}),
                        ("llm_d.kv_cache.get_scores", {"llm_d.kv_cache.token_count": 1024,
                                                       "llm_d.kv_cache.block_keys.count": 64}),
                        ("llm_d.kv_cache.index", {"llm_d.kv_cache.lookup.cache_hit": True,
                                                  "llm_d.kv_cache.lookup.blocks_found": 52}),
                        ("llm_d.epp.scorer.load_aware", {"llm_d.epp.scorer.type": "load-aware-scorer"}),
                        ("llm_d.epp.scorer.prefix_cache", {"llm_d.epp.scorer.type": "precise-prefix-cache-scorer"}),
                        ("llm_d.epp.scoring", {"llm_d.epp.scoring.candidate_endpoints": 5}),
                        ("pick_endpoints", {"llm_d.epp.picker.top_endpoints": [f"travel-desk-{i % 5}"],
                                            "llm_d.epp.picker.candidate_endpoints": 5})):
        s = t.start_span(name, context=ctx, start_time=t0 + MS, attributes=attrs)
        s.end(end_time=t0 + 2 * MS)
    prefill = 1.1 if away else 0.2
    s = t.start_span("llm_request", kind=SpanKind.SERVER, context=ctx, start_time=t0 + 3 * MS, attributes={
        "gen_ai.response.model": "granite-8b", "gen_ai.usage.prompt_tokens": 1024, "gen_ai.usage.completion_tokens": 40,
        "gen_ai.latency.time_in_queue": 0.0, "gen_ai.latency.time_to_first_token": prefill + 0.03,
        "gen_ai.latency.time_in_model_prefill": prefill, "gen_ai.latency.time_in_model_decode": 0.8,
        "gen_ai.latency.e2e": prefill + 0.83})
    s.end(end_time=t0 + 3 * MS + int((prefill + 0.83) * 1e9))
    gw.end(end_time=t0 + 5 * MS + int((prefill + 0.83) * 1e9))
    client.end(end_time=t0 + 6 * MS + int((prefill + 0.83) * 1e9))
    return 13  # 10 spans, 3 rows the engine's numbers imply (queue, prefill, decode)


def dynamo_router(tp_pair: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """Dynamo's KV router in its own span names (read in ai-dynamo/dynamo: kv_router.find_matches and
    kv_router.route_request in lib/llm/src/kv_router, engine.generate from PR 9543, the frontend's
    http-request), a trace of their own (the KV router drops the traceparent), joined to the app's OTel GenAI
    client span by the request id. 7 of 10 requests go to a worker holding none of the prefix (overlap_blocks
    0; the engine reused nothing), the twin's to the one holding 30 of the 32 blocks. Dynamo names the chosen
    worker's overlap only (the best worker's is a Prometheus metric and a DEBUG log line outside the request's
    spans: docs/integrations/engines.md), so diagnose cannot call it a route away; it names the lost prefix."""
    app_tp, eng_tp = tp_pair
    app, t = app_tp.get_tracer("opentelemetry.instrumentation.openai_v2"), eng_tp.get_tracer("dynamo.frontend")
    away = _affected(i, twin)
    rid = f"chatcmpl-legal-{i:04d}-{rng.getrandbits(32):08x}"
    ttft = 900.0 if away else 140.0
    http = t.start_span("http-request", kind=SpanKind.SERVER, start_time=t0 + MS, attributes={
        "request_id": rid, "uri": "/v1/chat/completions"})
    ctx = trace.set_span_in_context(http)
    t.start_span("kv_router.find_matches", context=ctx, start_time=t0 + MS, attributes={
        "block_count": 32, "block_size": 64}).end(end_time=t0 + MS + 100_000)
    route = t.start_span("kv_router.route_request", context=ctx, start_time=t0 + MS, attributes={
        "request_id": rid, "worker_id": 7587890 + (i % 4 if away else 7), "dp_rank": 0,
        "overlap_blocks": rng.randint(0, 1) if away else 30, "phase": "Aggregated"})
    t.start_span("engine.generate", context=trace.set_span_in_context(route), start_time=t0 + 2 * MS, attributes={
        "request_id": rid, "disagg_role": "decode", "model": "legal-research-70b", "input_tokens": 2048,
        "ttft_ms": ttft, "output_tokens": 120, "finish_reason": "stop"}).end(end_time=t0 + int((ttft + 2400) * MS))
    route.end(end_time=t0 + int((ttft + 2401) * MS))
    http.end(end_time=t0 + int((ttft + 2402) * MS))
    client = app.start_span("chat legal-research-70b", kind=SpanKind.CLIENT, start_time=t0, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "legal-research-70b", "gen_ai.response.model": "legal-research-70b",
        "gen_ai.response.id": rid, "gen_ai.usage.input_tokens": 2048, "gen_ai.usage.output_tokens": 120,
        "gen_ai.usage.cache_read.input_tokens": 0 if away else 30 * 64,  # what the engine reused, as told
        "gen_ai.response.finish_reasons": ["stop"], "server.address": "llm.internal"})
    client.end(end_time=t0 + int((ttft + 2500) * MS))
    return 5


def vllm_v1_queue(tp: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """vLLM V1 with its lifecycle child spans, latencies in nanoseconds: a queue in front of the engine."""
    t = tp.get_tracer("vllm.v1.engine")
    q_ms = rng.randint(1800, 2600) if _affected(i, twin) else 0
    pre, dec = 220, 700
    root = t.start_span("llm_request", kind=SpanKind.SERVER, start_time=t0, attributes={
        "gen_ai.response.model": "code-reviewer-14b", "gen_ai.usage.prompt_tokens": 700,
        "gen_ai.usage.completion_tokens": 60, "gen_ai.latency.time_in_queue": q_ms * MS,
        "gen_ai.latency.time_to_first_token": (q_ms + pre + 10) * MS,
        "gen_ai.latency.time_in_model_prefill": pre * MS, "gen_ai.latency.time_in_model_decode": dec * MS,
        "gen_ai.latency.e2e": (q_ms + pre + dec) * MS})
    ctx = trace.set_span_in_context(root)
    for name, a, b in (("vllm_queue", 0, q_ms), ("vllm_prefill", q_ms, q_ms + pre),
                       ("vllm_decode", q_ms + pre, q_ms + pre + dec)):
        s = t.start_span(name, context=ctx, start_time=t0 + a * MS)
        s.end(end_time=t0 + b * MS)
    root.end(end_time=t0 + (q_ms + pre + dec) * MS)
    return 4


def sglang_queue(tp: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """SGLang's request span: the same gen_ai.latency.* keys, in seconds, no child spans."""
    t = tp.get_tracer("sglang.srt")
    q = rng.uniform(1.5, 2.2) if _affected(i, twin) else 0.0
    s = t.start_span(f"Req {uuid.UUID(int=rng.getrandbits(128)).hex[:8]}", kind=SpanKind.SERVER, start_time=t0,
                     attributes={"sglang.rid": str(i), "gen_ai.response.model": "qwen-14b",
                                 "gen_ai.usage.prompt_tokens": 500, "gen_ai.usage.completion_tokens": 50,
                                 "gen_ai.latency.time_in_queue": q, "gen_ai.latency.time_to_first_token": q + 0.2,
                                 "gen_ai.latency.time_in_model_prefill": 0.18,
                                 "gen_ai.latency.time_in_model_decode": 0.5, "gen_ai.latency.e2e": q + 0.7})
    s.end(end_time=t0 + int((q + 0.7) * 1e9))
    return 4


def sglang_slices_queue(tp: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """SGLang's request trace as its --enable-trace writes it (srt/tracing/trace.py, req_time_stats.py
    RequestStage): bootstrap room -> `` Req <rid[:8]>`` (rid; gen_ai.latency.* in s at finish, no time in
    queue) -> the scheduler thread's span -> its slices. The wait for the first forward is the
    ``prefill_waiting`` slice alone; collect links it to the request (tracer/collect/otlp_sglang.py)."""
    t = tp.get_tracer("sglang server")
    wait = rng.randint(1400, 2100) if _affected(i, twin) else rng.randint(0, 3)
    rid = uuid.UUID(int=rng.getrandbits(128)).hex
    room = t.start_span("Bootstrap Room 0x0", start_time=t0, attributes={"bootstrap_room": "0x0"})
    req = t.start_span(f" Req {rid[:8]}", context=trace.set_span_in_context(room), start_time=t0,
                       attributes={"rid": rid})
    th = t.start_span("scheduler [TP 0] (host:9a0c41d2 | pid:5120)", context=trace.set_span_in_context(req),
                      start_time=t0, attributes={"thread_label": "scheduler", "tp_rank": 0, "pid": 5120})
    steps = [("request_process", 2, 3), ("prefill_waiting", 3, 3 + wait), ("prefill_forward", 3 + wait, 160 + wait)]
    steps += [("decode_loop", 160 + wait + 25 * k, 185 + wait + 25 * k) for k in range(8)]
    for name, a, b in steps:
        t.start_span(name, context=trace.set_span_in_context(th), start_time=t0 + a * MS).end(end_time=t0 + b * MS)
    end = t0 + (360 + wait) * MS
    th.end(end_time=end)
    req.set_attributes({"gen_ai.latency.time_to_first_token": (160 + wait) / 1000, "gen_ai.latency.e2e": (360 + wait) / 1000,
                        "gen_ai.latency.time_in_model_prefill": (157 + wait) / 1000,
                        "gen_ai.latency.time_in_model_decode": 0.2, "gen_ai.usage.prompt_tokens": 640,
                        "gen_ai.usage.completion_tokens": 9, "gen_ai.response.model": "claims-triage-32b"})
    req.end(end_time=end)
    room.end(end_time=end)
    return 3 + len(steps) + 1  # its spans and the decode row its numbers imply (their prefill row is dropped)


def vllm_join_queue(tp_pair: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """An app's OTel GenAI client spans and vLLM V1's, with no traceparent between them (a gateway that drops
    it): collect joins them by the response id (``chatcmpl-<id>``, vLLM's gen_ai.request.id;
    tracer/collect/otlp_join.py); vLLM's queue holds the requests."""
    app_tp, eng_tp = tp_pair
    app, eng = app_tp.get_tracer("opentelemetry.instrumentation.openai_v2"), eng_tp.get_tracer("vllm.v1.engine")
    rid = f"chatcmpl-{uuid.UUID(int=rng.getrandbits(128)).hex}"
    q_ms = rng.randint(1600, 2400) if _affected(i, twin) else 0
    pre, dec = 180, 500
    root = eng.start_span("llm_request", kind=SpanKind.SERVER, start_time=t0 + MS, attributes={
        "gen_ai.request.id": rid, "gen_ai.response.model": "support-8b", "gen_ai.usage.prompt_tokens": 600,
        "gen_ai.usage.completion_tokens": 40, "gen_ai.latency.time_in_queue": q_ms * MS,
        "gen_ai.latency.time_to_first_token": (q_ms + pre + 10) * MS, "gen_ai.latency.time_in_model_prefill": pre * MS,
        "gen_ai.latency.time_in_model_decode": dec * MS, "gen_ai.latency.e2e": (q_ms + pre + dec) * MS})
    ctx = trace.set_span_in_context(root)
    for name, a, b in (("vllm_queue", 0, q_ms), ("vllm_prefill", q_ms, q_ms + pre),
                       ("vllm_decode", q_ms + pre, q_ms + pre + dec)):
        eng.start_span(name, context=ctx, start_time=t0 + MS + a * MS).end(end_time=t0 + MS + b * MS)
    root.end(end_time=t0 + MS + (q_ms + pre + dec) * MS)
    client = app.start_span("chat support-8b", kind=SpanKind.CLIENT, start_time=t0, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "support-8b",
        "gen_ai.response.id": rid, "gen_ai.usage.input_tokens": 600, "gen_ai.usage.output_tokens": 40,
        "server.address": "gateway.support.internal", "gen_ai.response.finish_reasons": ["stop"]})
    client.end(end_time=t0 + 3 * MS + (q_ms + pre + dec) * MS)
    return 6


TRAVEL = ("You are the booking assistant of Northwind Travel. Quote only fares from the fare sheet you were "
          "given, hold a seat for at most twenty minutes, explain change fees before confirming, and offer "
          "travel insurance once per booking. Reply in the traveller's language. ") * 5


def client_engine_volatile(tp_pair: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """An app's OTel GenAI client spans (prompt captured) joined to vLLM's llm_request by traceparent; a
    session token at the top of the system prompt zeroes the engine's prefix hit."""
    app_tp, eng_tp = tp_pair
    app, eng = app_tp.get_tracer("opentelemetry.instrumentation.openai_v2"), eng_tp.get_tracer("vllm.v1.engine")
    head = "" if twin else f"session: {uuid.UUID(int=rng.getrandbits(128))}\n"
    msgs = [{"role": "system", "parts": [{"type": "text", "content": head + TRAVEL}]},
            {"role": "user", "parts": [{"type": "text", "content": f"Is there a seat to Lisbon on day {3 + i}?"}]}]
    client = app.start_span("chat travel-8b", kind=SpanKind.CLIENT, start_time=t0, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "travel-8b",
        "gen_ai.usage.input_tokens": 700, "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 640 if twin else 0, "server.address": "vllm.travel.internal",
        "gen_ai.input.messages": json.dumps(msgs), "gen_ai.response.finish_reasons": ["stop"]})
    headers: dict[str, str] = {}
    PROP.inject(headers, context=trace.set_span_in_context(client))
    prefill = 0.05 if twin else 0.7
    s = eng.start_span("llm_request", kind=SpanKind.SERVER, context=PROP.extract(headers), start_time=t0 + MS,
                       attributes={"gen_ai.response.model": "travel-8b", "gen_ai.usage.prompt_tokens": 700,
                                   "gen_ai.usage.completion_tokens": 20,
                                   "gen_ai.latency.time_in_queue": 0.0,
                                   "gen_ai.latency.time_to_first_token": prefill + 0.02,
                                   "gen_ai.latency.time_in_model_prefill": prefill,
                                   "gen_ai.latency.time_in_model_decode": 0.3,
                                   "gen_ai.latency.e2e": prefill + 0.32})
    s.end(end_time=t0 + MS + int((prefill + 0.32) * 1e9))
    client.end(end_time=t0 + 2 * MS + int((prefill + 0.32) * 1e9))
    return 5


PARCELS = ("You answer for the Harrow parcel depot. Say where a parcel is from the scan log you were given, "
           "never promise a delivery day, and give the depot's phone number only when asked. ") * 4
SCANS = ["Where is parcel HX-4410?", "Has parcel HX-4457 left Leeds?"]


def greedy_prefix_cache_path(tp: Any, i: int, t0: int, twin: bool, rng: random.Random) -> int:
    """A hosted model's answers at temperature 0 under OTel GenAI (openai-v2, content captured), one request at
    a time: each of two prompts asked five times, the first cold (no cached tokens), the rest served 512 cached
    prompt tokens by the provider. Planted: the cold passes answer differently from the cached ones (the
    prefix-cache path moved the greedy logits); the twin answers the same either way. Nothing says of batches."""
    app = tp.get_tracer("opentelemetry.instrumentation.openai_v2")
    ask = SCANS[i % 2]
    cold = i < 2
    answer = "It left Leeds at 09:40 and is on the van." if (twin or not cold) else \
        "It left Leeds at 09:40; it is on the van now."
    msgs = [{"role": "system", "parts": [{"type": "text", "content": PARCELS}]},
            {"role": "user", "parts": [{"type": "text", "content": ask}]}]
    out = [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]
    ttft = 0.62 if cold else 0.18
    client = app.start_span("chat depot-8b", kind=SpanKind.CLIENT, start_time=t0, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "depot-8b",
        "gen_ai.response.model": "depot-8b", "gen_ai.request.temperature": 0.0, "gen_ai.request.max_tokens": 40,
        "gen_ai.usage.input_tokens": 560, "gen_ai.usage.output_tokens": 14,
        "gen_ai.usage.cache_read.input_tokens": 0 if cold else 512, "server.address": "api.depot-llm.example",
        "gen_ai.input.messages": json.dumps(msgs), "gen_ai.output.messages": json.dumps(out),
        "gen_ai.response.finish_reasons": ["stop"]})
    client.end(end_time=t0 + int((ttft + 0.4) * 1e9))
    return 1


ENGINE_CASES: list[EngineCase] = [
    EngineCase("engine_llmd_router_away", ("arrival.replica_selection",), llmd_router, "llm-d", apps=2),
    # Dynamo names no best worker's overlap on its spans: the route away is read as the prefix it lost
    EngineCase("engine_dynamo_router_away", ("cache.prefix_match",), dynamo_router, "dynamo", apps=2),
    EngineCase("engine_vllm_v1_queue", ("arrival.admission",), vllm_v1_queue, "vllm-v1"),
    EngineCase("engine_sglang_queue", ("arrival.admission",), sglang_queue, "sglang"),
    EngineCase("engine_client_vllm_volatile", ("intake.system_prompt", "cache.prefix_match"),
               client_engine_volatile, "otel-genai+vllm", apps=2),
    # issue 37: SGLang's slices (its queue only there), and client + engine joined by response id
    EngineCase("engine_sglang_slices_queue", ("arrival.admission",), sglang_slices_queue, "sglang-trace"),
    EngineCase("engine_vllm_join_by_response_id_queue", ("arrival.admission",), vllm_join_queue,
               "otel-genai+vllm (no traceparent)", apps=2),
    # issue 35: greedy answers that differ by the prefix-cache path, not by batches (none recorded)
    EngineCase("otelv2_greedy_prefix_cache_path", ("cache.prefix_match",), greedy_prefix_cache_path, "otel-v2"),
]


def _provider(endpoint: str, service: str) -> TracerProvider:
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10),
                                             schedule_delay_millis=100))
    return tp


def emit_case(case: EngineCase, endpoint: str, service: str, twin: bool, t0: int) -> int:
    """Send the case's (or its twin's) requests; the rows the collector will write for them."""
    rng = random.Random(service)
    tps = [_provider(endpoint, service) for _ in range(case.apps)]
    rows = 0
    try:
        for i in range(N_REQUESTS):
            start = t0 + i * 4_000 * MS
            rows += case.emit(tps[0] if case.apps == 1 else tuple(tps), i, start, twin, rng)
    finally:
        for tp in tps:
            tp.shutdown()
    return rows
