"""Stores for the explorer's tests, recorded through the public recording API the way the components do:
an app-side agent span, client passes with the server pass beneath them (joined by traceparent), stage
spans with registry boundary values, tool calls between passes, and a deploy that breaks the cache.

Times and ids are fixed (explicit timestamps, seeded id generator) so screens can be snapshotted.
"""

from __future__ import annotations

import random
from pathlib import Path

from opentelemetry.trace import SpanKind

import llmtrace
from llmtrace.tracer import recording as rec
from llmtrace.tracer.storage.store import write_connection

BASE_NS = 1_795_000_000_000_000_000  # 2026-11-18 08:26:40 UTC
MS = 1_000_000
MODEL = "smollm2-135m"


def _tool(name: str, call_id: str, parent: rec.PassSpan, start_ns: int, end_ns: int, result_tokens: int) -> None:
    # rec.tool_span() stamps wall-clock time; tests need fixed times, so this records the same span
    # (same name, attributes and parent) with explicit start and end.
    attrs = rec.checked_values("loop.tool_dispatch", {
        "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id, "llmtrace.tool.scope": "read",
        "llmtrace.tool.result_tokens": result_tokens})
    attrs["gen_ai.operation.name"] = "execute_tool"
    span = rec._tracer().start_span(f"execute_tool {name}", context=parent.context, kind=SpanKind.INTERNAL,
                                    attributes=attrs, start_time=start_ns)  # type: ignore[arg-type]
    span.end(end_time=end_ns)


def _pass(root: rec.PassSpan, t: int, *, prompt: int, cached: int, out: int, ttft_ms: float, tpot_ms: float,
          finish: str, replica: str, parsed: bool = True) -> int:
    """One client pass with its server pass; returns when the client saw the last byte."""
    decode_ms = tpot_ms * max(0, out - 1)
    end = t + int((ttft_ms + decode_ms + 3) * MS)
    summary = {
        "gen_ai.response.model": MODEL, "gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": out,
        "gen_ai.usage.cache_read.input_tokens": cached, "gen_ai.response.finish_reasons": [finish],
        "gen_ai.request.temperature": 0.0, "gen_ai.request.max_tokens": 256, "llmtrace.ttft_ms": ttft_ms,
        "llmtrace.tpot_ms": tpot_ms, "llmtrace.replica.id": replica,
    }
    client = rec.start_pass(MODEL, side="client", parent=root, start_ns=t, provider="llmtrace",
                            attributes={**summary, "llmtrace.meters.cost_usd": (prompt - cached) * 2e-7 + out * 8e-7})
    rec.record_stage("arrival.connection", start_ns=t, end_ns=t + 1 * MS, parent=client,
                     values={"server.address": "127.0.0.1", "server.port": 8321, "llmtrace.connection.reused": True,
                             "llmtrace.connection.connect_ms": 0.4})
    s0 = t + 1 * MS
    server = rec.start_pass(MODEL, side="server", traceparent=client.traceparent(), start_ns=s0, attributes=summary)
    rec.record_stage("arrival.admission", start_ns=s0, end_ns=s0 + MS // 2, parent=server,
                     values={"llmtrace.admission.decision": "admit", "llmtrace.admission.queue_wait_ms": 0.3,
                             "llmtrace.admission.queue_depth": 0, "llmtrace.admission.running": 1})
    rec.record_stage("arrival.replica_selection", start_ns=s0 + MS // 2, end_ns=s0 + MS, parent=server,
                     values={"llmtrace.replica.id": replica, "llmtrace.replica.policy": "prefix-aware",
                             "llmtrace.replica.candidates": 2, "llmtrace.replica.expected_hit_tokens": cached})
    rec.record_stage("intake.chat_template", start_ns=s0 + MS, end_ns=s0 + 2 * MS, parent=server,
                     values={"llmtrace.template.matches_model": True, "llmtrace.template.rendered_chars": prompt * 4})
    rec.record_stage("intake.tokenization", start_ns=s0 + 2 * MS, end_ns=s0 + 3 * MS, parent=server,
                     values={"gen_ai.usage.input_tokens": prompt, "llmtrace.tokenization.chars_per_token": 4.0})
    rec.record_stage("cache.prefix_match", start_ns=s0 + 3 * MS, end_ns=s0 + 4 * MS, parent=server,
                     values={"gen_ai.usage.cache_read.input_tokens": cached, "llmtrace.prefix.hit_tokens": cached,
                             "llmtrace.prefix.first_miss_token": cached})
    prefill_end = t + int(ttft_ms * MS)
    rec.record_stage("forward.prefill", start_ns=s0 + 4 * MS, end_ns=prefill_end, parent=server,
                     values={"llmtrace.prefill.tokens": prompt - cached, "llmtrace.prefill.chunks": 1,
                             "llmtrace.prefill.ms": ttft_ms - 5})
    rec.record_stage("forward.decode", start_ns=prefill_end, end_ns=end - 2 * MS, parent=server,
                     values={"llmtrace.decode.steps": out, "llmtrace.decode.ms": decode_ms,
                             "llmtrace.decode.tpot_ms": tpot_ms})
    rec.record_stage("gen.sampling", start_ns=prefill_end, end_ns=prefill_end + MS // 4, parent=server,
                     values={"gen_ai.request.temperature": 0.0, "llmtrace.sampling.greedy": True})
    rec.record_stage("gen.stop", start_ns=end - 2 * MS, end_ns=end - 2 * MS + MS // 4, parent=server,
                     values={"gen_ai.response.finish_reasons": [finish], "gen_ai.request.max_tokens": 256,
                             "gen_ai.usage.output_tokens": out})
    server.end(end_ns=end - 1 * MS)
    rec.record_stage("gen.streaming", start_ns=prefill_end, end_ns=end, parent=client,
                     values={"llmtrace.stream.chunks": out, "gen_ai.response.time_to_first_chunk": ttft_ms / 1000})
    rec.record_stage("safety.stop_reason", start_ns=end, end_ns=end + MS // 4, parent=client,
                     values={"llmtrace.stop_reason.read": finish != "length",
                             "llmtrace.stop_reason.truncated": finish == "length", "llmtrace.stop_reason.parse_ok": parsed})
    client.end(end_ns=end + MS // 2)
    return end + MS


def _agent_trace(t: int, i: int, deploy_broke_cache: bool) -> None:
    prompt1, prompt2 = 900 + 37 * (i % 5), 1400 + 41 * (i % 7)
    cached1 = 0 if deploy_broke_cache else prompt1 - 120
    cached2 = 0 if deploy_broke_cache else prompt2 - 300
    ttft1 = 450.0 + 900.0 * deploy_broke_cache + 10 * i
    ttft2 = 520.0 + 1400.0 * deploy_broke_cache + 10 * i
    length = i % 4 == 3
    root = rec.start_pass("support-agent", operation="invoke_agent", side="app", start_ns=t)
    t1 = _pass(root, t + MS, prompt=prompt1, cached=cached1, out=24, ttft_ms=ttft1, tpot_ms=18.0,
               finish="tool_calls", replica=f"r{i % 2}")
    _tool("lookup_order", f"call_{i}_a", root, t1, t1 + 35 * MS, 180)
    _tool("search_kb", f"call_{i}_b", root, t1 + 36 * MS, t1 + 120 * MS, 420)
    t2 = _pass(root, t1 + 122 * MS, prompt=prompt2, cached=cached2, out=256 if length else 90 + i,
               ttft_ms=ttft2, tpot_ms=21.0, finish="length" if length else "stop", replica=f"r{(i + 1) % 2}",
               parsed=not length)
    rec.record_stage("meters.cache_accounting", start_ns=t2, end_ns=t2 + MS // 4, parent=root,
                     values={"llmtrace.meters.cache_hit_rate": (cached1 + cached2) / (prompt1 + prompt2),
                             "llmtrace.meters.cached_tokens": cached1 + cached2,
                             "llmtrace.meters.uncached_tokens": prompt1 + prompt2 - cached1 - cached2})
    root.end(end_ns=t2 + MS)


def record_support_store(path: Path, traces: int = 8, seed: int = 7) -> Path:
    """``traces`` agent traces (2 passes, 2 tools each); the second half under deploy v2, whose
    system prompt breaks the prefix cache (hit rate falls to 0 and TTFT rises)."""
    random.seed(seed)  # the SDK's id generator draws from `random`: fixed ids for snapshots
    half = traces // 2
    try:
        llmtrace.init(db=path, service_name="support-app", deploy="v1", strict=True)
        for i in range(half):
            _agent_trace(BASE_NS + i * 20_000 * MS, i, deploy_broke_cache=False)
        llmtrace.shutdown()
        deploy_at = BASE_NS + half * 20_000 * MS - 5_000 * MS
        with write_connection(path) as conn:  # what store.mark_deploy writes, at a fixed time
            conn.execute("INSERT INTO deploys VALUES ('v2', 'support-app', ?, 'new system prompt')", [deploy_at])
        llmtrace.init(db=path, service_name="support-app", deploy="v2", strict=True)
        for i in range(half, traces):
            _agent_trace(BASE_NS + i * 20_000 * MS, i, deploy_broke_cache=True)
    finally:
        llmtrace.shutdown()
    return path


def empty_store(path: Path) -> Path:
    with write_connection(path):
        pass
    return path
