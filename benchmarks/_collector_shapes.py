"""The engines' request shapes ``benchmarks/collector.py`` sends (``--shapes engines`` / ``both``): the spans
engines and routers write themselves, as ``llmtrace collect`` maps them (tracer/collect/otlp_engines.py), with
the apps' client spans it joins to them by response id (otlp_join.py) and SGLang's request trace whose
slices it links to their request (otlp_sglang.py)."""

from __future__ import annotations

import time

BATCH = 512


def engines_template_request() -> bytes:
    """One OTLP request of 512 engines' and routers' own spans, as ``collect`` maps them
    (tracer/collect/otlp_engines.py): vLLM V1's llm_request (ns) with its lifecycle children, ARMS's request
    and phase spans, llm-d's gateway, scoring, scorer, prefix-cache and KV-index spans, Dynamo's router and
    engine.generate pair; each request's phase spans end before it, so no stage row is synthesized twice and
    the collector writes one row a span. Filled to 512 with vLLM's per-step spans."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exp = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "bench-engines"}))
    tp.add_span_processor(SimpleSpanProcessor(exp))
    t = tp.get_tracer("engines")
    ms = 1_000_000
    t0 = time.time_ns()

    def children(root: object, names: list[tuple[str, dict[str, object]]]) -> None:
        ctx = trace.set_span_in_context(root)  # type: ignore[arg-type]
        for k, (name, attrs) in enumerate(names):
            c = t.start_span(name, context=ctx, start_time=t0 + k * ms, attributes=attrs)
            c.end(end_time=t0 + (k + 1) * ms)

    group = 27  # spans a round of the six shapes
    for i in range((BATCH - 8) // group):
        r = t.start_span("llm_request", start_time=t0, attributes={
            "gen_ai.request.id": f"chatcmpl-{i}", "gen_ai.response.model": "llama", "gen_ai.usage.prompt_tokens": 900 + i,
            "gen_ai.usage.completion_tokens": 11, "gen_ai.latency.time_in_queue": 4e8,
            "gen_ai.latency.time_to_first_token": 6.5e8, "gen_ai.latency.time_in_model_prefill": 2e8,
            "gen_ai.latency.time_in_model_decode": 5e8, "gen_ai.latency.e2e": 1.15e9})
        children(r, [("vllm_queue", {}), ("vllm_async_kv_transfer", {"vllm.num_blocks": 12}),
                     ("vllm_prefill", {"num_computed_tokens": 900}), ("vllm_decode", {})])
        r.end(end_time=t0 + 1150 * ms)
        r = t.start_span("llm_request", start_time=t0, attributes={
            "gen_ai.request.model": "qwen-max", "gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 9})
        children(r, [(n, {"gen_ai.request.id": f"arms-{i}"}) for n in ("wait", "kv_transfer", "prefill", "decode")])
        r.end(end_time=t0 + 900 * ms)
        r = t.start_span("gateway.request_orchestration", start_time=t0)
        children(r, [("produce_precise_prefix_cache", {"llm_d.epp.producer.total_blocks": 40,
                                                       "llm_d.epp.producer.max_match_blocks": 30}),
                     ("llm_d.kv_cache.index", {"llm_d.kv_cache.lookup.cache_hit": True,
                                               "llm_d.kv_cache.lookup.blocks_found": 30}),
                     ("llm_d.epp.scorer.prefix_cache", {"llm_d.epp.scorer.type": "precise-prefix-cache-scorer"}),
                     ("llm_d.epp.scoring", {"llm_d.epp.scoring.candidate_endpoints": 3}),
                     ("pick_endpoints", {"llm_d.epp.picker.top_endpoints": ["pod-b"],
                                         "llm_d.epp.picker.candidate_endpoints": 3})])
        r.end(end_time=t0 + 500 * ms)
        r = t.start_span("router.route_request", start_time=t0, attributes={"worker_id": "w1", "overlap_blocks": 3})
        children(r, [("engine.generate", {"disagg_role": "decode", "model": "llama", "input_tokens": 2048,
                                          "ttft_ms": 195.5, "output_tokens": 64, "finish_reason": "length"})])
        r.end(end_time=t0 + 900 * ms)
        _sglang_request(t, t0, f"{i:032x}")
        for rid in (f"chatcmpl-{i}", f"{i:032x}"):  # the app's client spans, in traces of their own: collect
            # joins each to its engine's trace by response id (tracer/collect/otlp_join.py)
            c = t.start_span("chat llama", kind=trace.SpanKind.CLIENT, start_time=t0 - ms, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
                "gen_ai.response.id": rid, "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 11})
            c.end(end_time=t0 + 1200 * ms)
    while len(exp.get_finished_spans()) < BATCH:
        s = t.start_span("vllm_step_execution", start_time=t0, attributes={"num_reqs": 4})
        s.end(end_time=t0 + ms)
    spans = exp.get_finished_spans()
    assert len(spans) == BATCH, len(spans)
    return encode_spans(spans).SerializeToString()


def _sglang_request(t: object, t0: int, rid: str) -> None:
    """SGLang's request trace (sglang/srt/tracing/trace.py): bootstrap room, request (rid, gen_ai.latency.* in
    s at finish), the scheduler thread's span and its slices (srt/tracing/req_time_stats.py RequestStage)."""
    from opentelemetry import trace

    ms = 1_000_000
    room = t.start_span("Bootstrap Room 0x0", start_time=t0, attributes={"bootstrap_room": "0x0"})  # type: ignore[attr-defined]
    req = t.start_span(f" Req {rid[:8]}", context=trace.set_span_in_context(room), start_time=t0,  # type: ignore[attr-defined]
                       attributes={"rid": rid})
    th = t.start_span("scheduler [TP 0] (host:5e1f0c2a | pid:4242)", context=trace.set_span_in_context(req),  # type: ignore[attr-defined]
                      start_time=t0, attributes={"thread_label": "scheduler", "tp_rank": 0, "pid": 4242})
    for k, name in enumerate(("prefill_waiting", "prefill_forward", "decode_loop")):
        t.start_span(name, context=trace.set_span_in_context(th), start_time=t0 + k * 100 * ms  # type: ignore[attr-defined]
                     ).end(end_time=t0 + (k + 1) * 100 * ms)
    th.end(end_time=t0 + 300 * ms)
    req.set_attributes({"gen_ai.latency.time_to_first_token": 0.2, "gen_ai.latency.e2e": 0.3,
                        "gen_ai.latency.time_in_model_prefill": 0.1, "gen_ai.latency.time_in_model_decode": 0.1,
                        "gen_ai.usage.prompt_tokens": 900, "gen_ai.usage.completion_tokens": 11})
    req.end(end_time=t0 + 300 * ms)
    room.end(end_time=t0 + 300 * ms)


def rows_per_body(body: bytes) -> int:
    """The rows collect writes for one request (an engine's request span adds the stage rows its numbers
    imply): decoded in-process by the collector's own decoder."""
    from llmtrace.tracer.collect.otlp_decode import decode
    from llmtrace.tracer.collect.otlp_mapping import Mapper

    return int(decode(body, "application/x-protobuf", None, max_bytes=1 << 30, mapper=Mapper()).table.num_rows)
