"""Engines' and routers' own spans, sent through the stock OTLP/HTTP exporter into a real `llmtrace collect`,
mapped onto stages (tracer/collect/otlp_engines.py).

Each payload follows the project's own names, source named beside it:
- vLLM V1 request-lifecycle child spans: vllm-project/vllm PR 44402 ("Implement request lifecycle spans and
  root span hierarchy": vllm_queue, vllm_async_kv_transfer, vllm_prefill, vllm_decode, vllm_step_execution),
  under vLLM's ``llm_request`` span (vllm/tracing.py SpanAttributes: gen_ai.latency.*), V1 in nanoseconds;
- SGLang's request trace: the same gen_ai.latency.* keys, in seconds (sglang docs: production_request_trace);
- Alibaba ARMS: llm_request -> wait -> kv_transfer, prefill, decode (ARMS LLM trace docs);
- NVIDIA Dynamo: router.route_request -> engine.generate with disagg_role, input_tokens, ttft_ms,
  output_tokens, finish_reason (ai-dynamo/dynamo PR 9543);
- llm-d: gateway.request_orchestration, llm_d.epp.scoring -> llm_d.epp.scorer.<type>, pick_endpoints,
  produce_precise_prefix_cache, llm_d.kv_cache.index, pick_disagg_profile, with the attribute keys of llm-d's
  telemetry semconv package (llm_d.epp.producer.max_match_blocks / total_blocks, llm_d.epp.picker.top_endpoints,
  llm_d.kv_cache.lookup.cache_hit / blocks_found, llm_d.kv_cache.token_count / block_keys.count,
  llm_d.epp.profile_handler.selected_profile; llm-d docs/proposals/distributed-tracing.md).
The app's client span and the engine's spans are two services joined by a real W3C traceparent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from collector_helpers import otlp_provider, query, start_collector
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

T0 = 1_780_000_000_000_000_000
MS = 1_000_000
PROP = TraceContextTextMapPropagator()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("engines")
    col = start_collector(tmp)
    try:
        app_tp = otlp_provider(col.endpoint, "shop-app")
        eng_tp = otlp_provider(col.endpoint, "engine", **{"k8s.pod.name": "vllm-0"})
        app, eng = app_tp.get_tracer("openai-v2"), eng_tp.get_tracer("vllm.llm_engine")

        # ── vLLM V1: app client span -> traceparent -> llm_request (ns) with its lifecycle children
        client = app.start_span("chat llama", kind=SpanKind.CLIENT, start_time=T0, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
            "mark": "v1-client"})
        headers: dict[str, str] = {}  # the request's traceparent header, as the engine reads it
        PROP.inject(headers, context=trace.set_span_in_context(client))
        root = eng.start_span("llm_request", kind=SpanKind.SERVER, context=PROP.extract(headers), start_time=T0 + 5 * MS,
                              attributes={
            "gen_ai.response.model": "llama", "gen_ai.request.id": "cmpl-v1", "gen_ai.usage.prompt_tokens": 900,
            "gen_ai.usage.completion_tokens": 11, "gen_ai.latency.time_in_queue": 400_000_000,  # 0.4 s in ns
            "gen_ai.latency.time_to_first_token": 650_000_000, "gen_ai.latency.time_in_model_prefill": 200_000_000,
            "gen_ai.latency.time_in_model_decode": 500_000_000, "gen_ai.latency.e2e": 1_150_000_000,
            "mark": "v1-engine"})
        ctx = trace.set_span_in_context(root)
        for name, a, b, attrs in (("vllm_queue", 5, 405, {}),
                                  ("vllm_async_kv_transfer", 405, 455, {"vllm.num_blocks": 12}),
                                  ("vllm_prefill", 455, 655, {"num_computed_tokens": 900}),
                                  ("vllm_step_execution", 455, 475, {"num_reqs": 4}),
                                  ("vllm_decode", 655, 1155, {})):
            s = eng.start_span(name, context=ctx, start_time=T0 + a * MS, attributes={**attrs, "mark": f"v1-{name}"})
            s.end(end_time=T0 + b * MS)
        root.end(end_time=T0 + 1155 * MS)
        client.end(end_time=T0 + 1160 * MS)

        # ── SGLang: seconds, no child spans: the rows come from the numbers
        s = eng.start_span("Req 7f3a", kind=SpanKind.SERVER, start_time=T0, attributes={
            "sglang.rid": "7f3a", "gen_ai.response.model": "qwen", "gen_ai.usage.prompt_tokens": 300,
            "gen_ai.usage.completion_tokens": 5, "gen_ai.latency.time_in_queue": 0.05,
            "gen_ai.latency.time_to_first_token": 0.25, "gen_ai.latency.time_in_model_prefill": 0.2,
            "gen_ai.latency.time_in_model_decode": 0.4, "gen_ai.latency.e2e": 0.65, "mark": "sglang"})
        s.end(end_time=T0 + 650 * MS)

        # ── ARMS: llm_request -> wait, kv_transfer, prefill, decode; and an app's own "decode" span
        root = eng.start_span("llm_request", kind=SpanKind.SERVER, start_time=T0, attributes={
            "gen_ai.request.model": "qwen-max", "gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 9,
            "gen_ai.response.finish_reasons": ["length"], "mark": "arms"})
        ctx = trace.set_span_in_context(root)
        for name, a, b in (("wait", 0, 300), ("kv_transfer", 300, 340), ("prefill", 340, 500), ("decode", 500, 900)):
            s = eng.start_span(name, context=ctx, start_time=T0 + a * MS,
                               attributes={"gen_ai.request.id": "arms-1", "mark": f"arms-{name}"})
            s.end(end_time=T0 + b * MS)
        root.end(end_time=T0 + 900 * MS)
        s = app.start_span("decode", start_time=T0, attributes={"bytes": 120, "mark": "app-decode"})
        s.end(end_time=T0 + 2 * MS)

        # ── Dynamo: router.route_request -> engine.generate (prefill worker, decode worker)
        route = eng.start_span("router.route_request", start_time=T0, attributes={
            "worker_id": "decode-2", "overlap_blocks": 3, "mark": "dynamo-route"})
        ctx = trace.set_span_in_context(route)
        s = eng.start_span("engine.generate", context=ctx, start_time=T0 + MS, attributes={
            "disagg_role": "prefill", "model": "llama-70b", "input_tokens": 2048, "ttft_ms": 180.0,
            "output_tokens": 1, "finish_reason": "length", "mark": "dynamo-prefill"})
        s.end(end_time=T0 + 181 * MS)
        s = eng.start_span("engine.generate", context=ctx, start_time=T0 + 181 * MS, attributes={
            "disagg_role": "decode", "model": "llama-70b", "input_tokens": 2048, "ttft_ms": 195.5,
            "output_tokens": 64, "finish_reason": "length", "mark": "dynamo-decode"})
        s.end(end_time=T0 + 900 * MS)
        route.end(end_time=T0 + 900 * MS)

        # ── llm-d: the picker chose pod-b; the best endpoint held 30 of the prompt's 40 blocks of 16 tokens
        gw = eng.start_span("gateway.request_orchestration", start_time=T0, attributes={"mark": "llmd-gateway"})
        ctx = trace.set_span_in_context(gw)
        for name, attrs in (("produce_precise_prefix_cache", {"llm_d.epp.producer.total_blocks": 40,
                                                              "llm_d.epp.producer.max_match_blocks": 30,
                                                              "llm_d.epp.producer.candidate_endpoints": 3}),
                            ("llm_d.kv_cache.get_scores", {"llm_d.kv_cache.token_count": 640,
                                                           "llm_d.kv_cache.block_keys.count": 40}),
                            ("llm_d.kv_cache.index", {"llm_d.kv_cache.lookup.cache_hit": True,
                                                      "llm_d.kv_cache.lookup.blocks_found": 30,
                                                      "llm_d.kv_cache.index.lookup.block_count": 40}),
                            ("llm_d.epp.scorer.prefix_cache", {"llm_d.epp.scorer.type": "precise-prefix-cache-scorer",
                                                               "llm_d.epp.scorer.score.max": 0.75}),
                            ("pick_disagg_profile", {"llm_d.epp.profile_handler.selected_profile": "decode"}),
                            ("llm_d.epp.scoring", {"llm_d.epp.scoring.candidate_endpoints": 3}),
                            ("pick_endpoints", {"llm_d.epp.picker.top_endpoints": ["pod-b"],
                                                "llm_d.epp.picker.candidate_endpoints": 3})):
            s = eng.start_span(name, context=ctx, start_time=T0 + MS, attributes={**attrs, "mark": f"llmd-{name}"})
            s.end(end_time=T0 + 2 * MS)
        gw.end(end_time=T0 + 500 * MS)
        app_tp.shutdown()
        eng_tp.shutdown()
        col.wait_written(28)  # 25 spans and the 3 rows SGLang's numbers imply (V1's stages are its own spans)
    finally:
        assert col.stop() == 0
    return col.db


def _span(db: Path, mark: str) -> dict[str, object]:
    rows = query(db, "SELECT stage, operation, trace_id, attributes FROM spans WHERE attributes->>'mark' = ?", [mark])
    assert len(rows) == 1, (mark, rows)
    stage, op, trace_id, attrs = rows[0]
    return {"stage": stage, "operation": op, "trace_id": trace_id, **json.loads(str(attrs))}


def _stage_rows(db: Path, parent_mark: str) -> dict[str, dict[str, object]]:
    """The stage rows under a span (synthesized from its numbers, or its own children), by stage."""
    rows = query(db, """SELECT c.stage, c.attributes FROM spans c JOIN spans p ON c.parent_span_id = p.span_id
                        WHERE p.attributes->>'mark' = ? AND c.stage IS NOT NULL""", [parent_mark])
    out: dict[str, dict[str, object]] = {}
    for stage, attrs in rows:
        assert stage not in out, f"two {stage} rows under {parent_mark}"
        out[str(stage)] = json.loads(str(attrs))
    return out


def test_vllm_v1_nanoseconds_and_child_spans(store: Path) -> None:
    root = _span(store, "v1-engine")
    assert root["llmtrace.latency.unit"] == "ns"
    assert root["llmtrace.ttft_ms"] == pytest.approx(650.0)
    assert root["llmtrace.ttft.source"] == "gen_ai.latency.time_to_first_token/ns"
    assert root["llmtrace.admission.queue_wait_ms"] == pytest.approx(400.0)
    rows = _stage_rows(store, "v1-engine")
    # one row a stage, whichever of the request's numbers and its own child spans came first
    assert set(rows) == {"arrival.admission", "cache.host_offload", "forward.prefill", "forward.decode"}
    adm = rows["arrival.admission"]
    assert adm["llmtrace.admission.queue_wait_ms"] == pytest.approx(400.0)
    assert adm["llmtrace.admission.decision"] == "queued" and adm["llmtrace.observed"] is True
    kv = rows["cache.host_offload"]
    assert kv["llmtrace.offload.source"] == "remote" and kv["llmtrace.offload.blocks_in"] == 12
    assert kv["llmtrace.offload.ms"] == pytest.approx(50.0) and kv["llmtrace.mapped_from"] == "vllm-v1"
    assert rows["forward.prefill"]["llmtrace.prefill.ms"] == pytest.approx(200.0)
    assert rows["forward.decode"]["llmtrace.decode.ms"] == pytest.approx(500.0)
    step = _span(store, "v1-vllm_step_execution")
    assert step["stage"] is None and step["llmtrace.mapped_from"] == "vllm-v1"


def test_client_and_engine_join_by_traceparent(store: Path) -> None:
    client, engine = _span(store, "v1-client"), _span(store, "v1-engine")
    assert client["trace_id"] == engine["trace_id"]
    rows = query(store, "SELECT observed_by, prompt_tokens, ttft_ms, queue_wait_ms, replica FROM passes "
                        "WHERE trace_id = ?", [client["trace_id"]])
    # the engine's pod (its resource's k8s.pod.name) is the pass's replica
    assert rows == [("both", 900, pytest.approx(650.0), pytest.approx(400.0), "vllm-0")]


def test_sglang_seconds(store: Path) -> None:
    s = _span(store, "sglang")
    assert s["llmtrace.latency.unit"] == "s" and s["gen_ai.provider.name"] == "sglang"
    assert s["llmtrace.ttft_ms"] == pytest.approx(250.0)
    rows = _stage_rows(store, "sglang")
    assert rows["arrival.admission"]["llmtrace.admission.queue_wait_ms"] == pytest.approx(50.0)
    assert rows["forward.decode"]["llmtrace.decode.tpot_ms"] == pytest.approx(100.0)  # 0.4 s over 4 tokens
    assert rows["forward.decode"]["llmtrace.mapped_from"] == "sglang"


def test_arms_children_and_an_apps_own_decode_span(store: Path) -> None:
    want = {"arms-wait": "arrival.admission", "arms-kv_transfer": "cache.host_offload",
            "arms-prefill": "forward.prefill", "arms-decode": "forward.decode"}
    for mark, stage in want.items():
        s = _span(store, mark)
        assert s["stage"] == stage and s["llmtrace.mapped_from"] == "arms" and s["llmtrace.observed"] is True
    assert _span(store, "arms-wait")["llmtrace.admission.queue_wait_ms"] == pytest.approx(300.0)
    assert _span(store, "arms")["llmtrace.finish_reason"] == "length"
    assert _span(store, "app-decode")["stage"] is None  # no gen_ai.* beside it: the app's, not an engine's


def test_dynamo_engine_generate(store: Path) -> None:
    pre, dec = _span(store, "dynamo-prefill"), _span(store, "dynamo-decode")
    assert pre["stage"] == "forward.prefill" and pre["operation"] is None
    assert pre["llmtrace.prefill.tokens"] == 2048 and pre["llmtrace.mapped_from"] == "dynamo"
    assert dec["operation"] == "chat" and dec["llmtrace.side"] == "server"
    rows = query(store, "SELECT prompt_tokens, output_tokens, ttft_ms, finish_reason, model FROM requests "
                        "WHERE attributes->>'mark' = 'dynamo-decode'")
    assert rows == [(2048, 64, pytest.approx(195.5), "length", "llama-70b")]
    route = _span(store, "dynamo-route")
    assert route["stage"] == "arrival.replica_selection" and route["llmtrace.replica.id"] == "decode-2"
    assert route["llmtrace.replica.expected_hit_blocks"] == 3


def test_llm_d_router_and_kv_index(store: Path) -> None:
    sel = _span(store, "llmd-pick_endpoints")  # the picker writes the row, with what the spans before it said
    assert sel["stage"] == "arrival.replica_selection" and sel["llmtrace.mapped_from"] == "llm-d"
    assert sel["llmtrace.replica.id"] == "pod-b" and sel["llmtrace.replica.best_hit_blocks"] == 30
    assert sel["llmtrace.replica.total_blocks"] == 40 and sel["llmtrace.replica.candidates"] == 3
    assert sel["llmtrace.replica.role"] == "decode" and sel["llmtrace.replica.block_tokens"] == 16
    # llm-d names no endpoint's own match: the chosen one's is left to the engine's cached tokens
    assert "llmtrace.replica.expected_hit_blocks" not in sel and "llmtrace.replica.blocks_lost" not in sel
    assert _span(store, "llmd-llm_d.epp.scoring")["stage"] is None  # it names no endpoint: the picker does
    idx = _span(store, "llmd-llm_d.kv_cache.index")
    assert idx["stage"] == "cache.prefix_match" and idx["llmtrace.prefix.hit_blocks"] == 30
    assert idx["llmtrace.prefix.total_blocks"] == 40 and idx["llmtrace.prefix.source"] == "router_index"
    assert _span(store, "llmd-gateway")["stage"] is None
