"""Engines' and routers' own spans, sent through the stock OTLP/HTTP exporter into a real `llmtrace collect`,
mapped onto stages (tracer/collect/otlp_engines.py).

Each payload follows the project's own names, source named beside it:
- vLLM V1 request-lifecycle child spans: vllm-project/vllm PR 44402 ("Implement request lifecycle spans and
  root span hierarchy": vllm_queue, vllm_async_kv_transfer, vllm_prefill, vllm_decode, vllm_step_execution),
  under vLLM's ``llm_request`` span (vllm/tracing.py SpanAttributes: gen_ai.latency.*), V1 in nanoseconds;
- SGLang's request trace: the same gen_ai.latency.* keys, in seconds (sglang docs: production_request_trace);
- Alibaba ARMS: llm_request -> wait -> kv_transfer, prefill, decode (ARMS LLM trace docs);
- NVIDIA Dynamo (ai-dynamo/dynamo): the frontend's ``http-request`` root (lib/llm/src/http/service: request_id,
  x_request_id, model, ttft_ms, decode_worker_id), in KV mode ``kv_router.find_matches`` (block_count,
  block_size) and ``kv_router.route_request`` (lib/llm/src/kv_router: request_id, worker_id, dp_rank,
  overlap_blocks, phase), in the other modes ``router.route_request`` (lib/runtime/src/pipeline/network/egress/
  push_router.rs: request_id, worker_id, router_mode, request.attempt, request.outcome), the worker's
  ``handle_payload`` and ``engine.generate`` (disagg_role, model, input_tokens: tests/frontend/
  test_unified_worker_otlp_export.py; ttft_ms, output_tokens, finish_reason: PR 9543);
- llm-d (llm-d/llm-d-router, key names from pkg/common/observability/semconv/llm_d.go):
  gateway.request_orchestration (pkg/epp/requestcontrol/director.go), produce_precise_prefix_cache
  (pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/producer.go: llm_d.epp.producer.
  total_blocks / max_match_blocks / candidate_endpoints) with score_tokens (pkg/kvcache/indexer.go:
  llm_d.kv_cache.token_count / block_keys.count) and index_lookup (pkg/kvcache/kvblock/traced_index.go:
  llm_d.kv_cache.index.lookup.block_count, llm_d.kv_cache.lookup.cache_hit / blocks_found), pick_pd_profile
  (pkg/epp/framework/plugins/scheduling/profilehandler/disagg/pd_profile_handler.go:
  llm_d.epp.profile_handler.decision / selected_profile), run_scheduler_profile (pkg/epp/scheduling/
  scheduler.go: llm_d.epp.scheduling.profile.name) holding llm_d.epp.scoring -> llm_d.epp.scorer.<type> and
  pick_endpoints (pkg/epp/scheduling/scheduler_profile.go: llm_d.epp.picker.top_endpoints / top_scores /
  candidate_endpoints); the older llm-d-kv-cache span name llm_d.kv_cache.index too.
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

        # ── Dynamo, KV mode (lib/llm/src/kv_router): the frontend's root, the match and the route, then the
        # prefill worker's and the decode worker's engine.generate under the worker's handle_payload
        dyn = eng_tp.get_tracer("dynamo")
        http = dyn.start_span("http-request", kind=SpanKind.SERVER, start_time=T0, attributes={
            "method": "POST", "uri": "/v1/chat/completions", "request_id": "dyn-1", "x_request_id": "dyn-1",
            "model": "llama-70b", "input_tokens": 2048, "output_tokens": 64, "ttft_ms": 196.0,
            "decode_worker_id": 7587890, "mark": "dynamo-http"})
        ctx = trace.set_span_in_context(http)
        s = dyn.start_span("kv_router.find_matches", context=ctx, start_time=T0, attributes={
            "block_count": 128, "block_size": 16, "retained": True, "shared_cache": False, "mark": "dynamo-match"})
        s.end(end_time=T0 + MS)
        route = dyn.start_span("kv_router.route_request", context=ctx, start_time=T0 + MS, attributes={
            "request_id": "dyn-1", "worker_id": 7587890, "dp_rank": 0, "overlap_blocks": 3, "phase": "Decode",
            "mark": "dynamo-route"})
        worker = dyn.start_span("handle_payload", kind=SpanKind.SERVER, context=trace.set_span_in_context(route),
                                start_time=T0 + MS)
        ctx = trace.set_span_in_context(worker)
        s = dyn.start_span("engine.generate", context=ctx, start_time=T0 + MS, attributes={
            "disagg_role": "prefill", "model": "llama-70b", "input_tokens": 2048, "ttft_ms": 180.0,
            "output_tokens": 1, "finish_reason": "length", "mark": "dynamo-prefill"})
        s.end(end_time=T0 + 181 * MS)
        s = dyn.start_span("engine.generate", context=ctx, start_time=T0 + 181 * MS, attributes={
            "disagg_role": "decode", "model": "llama-70b", "input_tokens": 2048, "ttft_ms": 195.5,
            "output_tokens": 64, "finish_reason": "length", "mark": "dynamo-decode"})
        s.end(end_time=T0 + 900 * MS)
        worker.end(end_time=T0 + 900 * MS)
        route.end(end_time=T0 + 900 * MS)
        http.end(end_time=T0 + 901 * MS)
        # ── Dynamo, round-robin mode (push_router.rs): router.route_request names the worker and the mode
        s = dyn.start_span("router.route_request", kind=SpanKind.CLIENT, start_time=T0, attributes={
            "request_id": "dyn-2", "worker_id": 42, "router_mode": "RoundRobin", "request.attempt": 0,
            "request.outcome": "success", "migration.is_retry": False, "mark": "dynamo-rr"})
        s.end(end_time=T0 + 500 * MS)

        # ── llm-d (llm-d-router): the producer saw the prompt's 40 blocks, the best endpoint holding 30; the
        # profile handler runs decode then prefill, each profile's picker names its endpoint
        gw = eng.start_span("gateway.request_orchestration", kind=SpanKind.SERVER, start_time=T0,
                            attributes={"target_model": "llama", "request_prio": 0, "mark": "llmd-gateway"})
        ctx = trace.set_span_in_context(gw)

        def llmd(name: str, attrs: dict[str, object], parent: object = None, end: bool = True) -> object:
            span = eng.start_span(name, context=trace.set_span_in_context(parent) if parent else ctx,
                                  start_time=T0 + MS, attributes={"gen_ai.request.id": "llmd-1",
                                                                  "mark": f"llmd-{name}", **attrs})
            if end:
                span.end(end_time=T0 + 2 * MS)
            return span

        prod = llmd("produce_precise_prefix_cache", {"llm_d.epp.producer.candidate_endpoints": 3}, end=False)
        llmd("score_tokens", {"llm_d.kv_cache.pod_count": 3, "llm_d.kv_cache.token_count": 640,
                              "llm_d.kv_cache.block_keys.count": 40}, parent=prod)
        llmd("index_lookup", {"llm_d.kv_cache.index.lookup.block_count": 40, "llm_d.kv_cache.lookup.pod_filter_count": 3,
                              "llm_d.kv_cache.lookup.cache_hit": True, "llm_d.kv_cache.lookup.blocks_found": 30},
             parent=prod)
        prod.set_attributes({"llm_d.epp.producer.total_blocks": 40, "llm_d.epp.producer.max_match_blocks": 30})
        prod.end(end_time=T0 + 2 * MS)
        for profile, picked in (("decode", "pod-b"), ("prefill", "pod-c")):
            llmd("pick_pd_profile", {"llm_d.epp.profile_handler.decision": f"run_{profile}",
                                     "llm_d.epp.profile_handler.selected_profile": profile})
            run = llmd("run_scheduler_profile", {"llm_d.epp.scheduling.profile.name": profile}, end=False)
            llmd("llm_d.epp.scoring", {"llm_d.epp.scorer.count": 2, "llm_d.epp.scoring.candidate_endpoints": 3},
                 parent=run)
            llmd("llm_d.epp.scorer.precise-prefix-cache-scorer", {
                "llm_d.epp.scorer.type": "precise-prefix-cache-scorer", "llm_d.epp.scorer.name": "prefix",
                "llm_d.epp.scorer.weight": 1.0, "llm_d.epp.scorer.candidate_endpoints": 3,
                "llm_d.epp.scorer.score.max": 0.75}, parent=run)
            llmd("pick_endpoints", {"llm_d.epp.picker.candidate_endpoints": 3,
                                    "llm_d.epp.picker.top_endpoints": [picked, "pod-a"],
                                    "llm_d.epp.picker.top_scores": [0.9, 0.7], "mark": f"llmd-pick-{profile}"},
                 parent=run)
            run.set_attribute("mark", f"llmd-run-{profile}")
            run.end(end_time=T0 + 2 * MS)
        # the older llm-d-kv-cache name of the index lookup
        llmd("llm_d.kv_cache.index", {"llm_d.kv_cache.index.lookup.block_count": 40,
                                      "llm_d.kv_cache.lookup.cache_hit": False, "llm_d.kv_cache.lookup.blocks_found": 0})
        gw.end(end_time=T0 + 500 * MS)
        app_tp.shutdown()
        eng_tp.shutdown()
        col.wait_written(39)  # 36 spans and the 3 rows SGLang's numbers imply (V1's stages are its own spans)
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


def test_dynamo_kv_router(store: Path) -> None:
    """KV mode: the chosen worker (an integer id), its overlap, the phase as the role; the prompt's blocks and
    the block size from kv_router.find_matches before it. Dynamo names no best worker's overlap."""
    route = _span(store, "dynamo-route")
    assert route["stage"] == "arrival.replica_selection" and route["llmtrace.mapped_from"] == "dynamo"
    assert route["llmtrace.replica.id"] == "7587890" and route["llmtrace.replica.expected_hit_blocks"] == 3
    assert route["llmtrace.replica.role"] == "decode" and route["llmtrace.replica.policy"] == "prefix_aware"
    assert route["llmtrace.replica.total_blocks"] == 128 and route["llmtrace.replica.block_tokens"] == 16
    assert route["llmtrace.replica.expected_hit_tokens"] == 48
    assert "llmtrace.replica.best_hit_blocks" not in route and "llmtrace.replica.blocks_lost" not in route
    assert _span(store, "dynamo-match")["stage"] is None and _span(store, "dynamo-http")["stage"] is None
    assert _span(store, "dynamo-http")["llmtrace.mapped_from"] == "dynamo"


def test_dynamo_push_router_mode(store: Path) -> None:
    rr = _span(store, "dynamo-rr")
    assert rr["stage"] == "arrival.replica_selection" and rr["llmtrace.replica.id"] == "42"
    assert rr["llmtrace.replica.policy"] == "round_robin"


def test_llm_d_router_and_kv_index(store: Path) -> None:
    """One arrival.replica_selection row a scheduler profile run (decode, then prefill), each with the role
    the profile handler chose before it and the producer's facts."""
    for profile, picked in (("decode", "pod-b"), ("prefill", "pod-c")):
        sel = _span(store, f"llmd-pick-{profile}")  # the picker writes the row, with what the spans before said
        assert sel["stage"] == "arrival.replica_selection" and sel["llmtrace.mapped_from"] == "llm-d"
        assert sel["llmtrace.replica.id"] == picked and sel["llmtrace.replica.best_hit_blocks"] == 30
        assert sel["llmtrace.replica.total_blocks"] == 40 and sel["llmtrace.replica.candidates"] == 3
        assert sel["llmtrace.replica.role"] == profile and sel["llmtrace.replica.block_tokens"] == 16
        # llm-d names no endpoint's own match: the chosen one's is left to the engine's cached tokens
        assert "llmtrace.replica.expected_hit_blocks" not in sel and "llmtrace.replica.blocks_lost" not in sel
        assert _span(store, f"llmd-run-{profile}")["llmtrace.mapped_from"] == "llm-d"
    scoring = query(store, "SELECT stage FROM spans WHERE attributes->>'mark' = 'llmd-llm_d.epp.scoring'")
    assert scoring == [(None,), (None,)]  # it names no endpoint: the picker does
    idx = _span(store, "llmd-index_lookup")
    assert idx["stage"] == "cache.prefix_match" and idx["llmtrace.prefix.hit_blocks"] == 30
    assert idx["llmtrace.prefix.total_blocks"] == 40 and idx["llmtrace.prefix.source"] == "router_index"
    old = _span(store, "llmd-llm_d.kv_cache.index")
    assert old["stage"] == "cache.prefix_match" and old["llmtrace.prefix.hit_blocks"] == 0
    assert _span(store, "llmd-gateway")["stage"] is None
