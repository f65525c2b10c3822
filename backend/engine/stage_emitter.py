"""Turns a finished sequence's stats into its stage spans (Cache & reuse, Forward pass, Generation) and the
summary values of its pass span. Runs once per pass, when the sequence finishes or is aborted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmtrace.backend.engine.self_time import COUNTED_IN, exclusive
from llmtrace.backend.engine.sequence import Sequence
from llmtrace.tracer.registry.stages import COUNTED_IN as COUNTED_IN_VALUE
from llmtrace.tracer.registry.stages import IDLE, SELF_MS, TTFT_MS


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What the emitter needs to know about the engine (fixed for its lifetime)."""

    model_name: str
    dtype: str
    hidden_size: int
    vocab_size: int
    rope_theta: float
    trained_context: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    num_params: int
    lm_head_params: int
    block_size: int
    kv_bytes_per_token: int
    eviction_policy: str
    watermark: float
    attention_backend: str
    attention_reason: str
    attention_fallback: bool
    attention_path: str
    invariant: bool
    prefix_cache: bool
    host_tier_blocks: int
    num_blocks: int = 0  # KV blocks in the device pool (the pool-size replay in diagnose starts from it)


def _ms(ns: int) -> float:
    return ns / 1e6


def timing_values(stage_id: str, self_ns: int, before_first_ns: int) -> dict[str, object]:
    """The uniform timing values of one stage span (tracer/registry/stages.py COMMON_VALUES)."""
    counted_in = COUNTED_IN.get(stage_id) if self_ns == 0 else None
    return {SELF_MS: round(_ms(self_ns), 3), TTFT_MS: round(_ms(before_first_ns), 3),
            IDLE: self_ns == 0 and counted_in is None, COUNTED_IN_VALUE: counted_in}


def stage_values(seq: Sequence, facts: EngineFacts, free_blocks: int) -> dict[str, dict[str, object]]:
    """Boundary values of stages 12-26 and 31 for one pass."""
    s = seq.stats
    sec = s.section_ms
    prefill_tps = s.prefill_tokens / (s.prefill_ms / 1e3) if s.prefill_ms > 0 else 0.0
    tpot = (_ms(s.last_token_ns - s.first_token_ns) / (seq.num_output_tokens - 1)) if seq.num_output_tokens > 1 else 0.0
    return {
        "cache.prefix_match": {
            "gen_ai.usage.cache_read.input_tokens": seq.num_cached_tokens,
            "llmtrace.prefix.hit_tokens": s.prefix_hit_tokens,
            "llmtrace.prefix.first_miss_token": s.prefix_first_miss,
            "llmtrace.prefix.key": s.prefix_key,
            "llmtrace.prefix.enabled": facts.prefix_cache,
        },
        "cache.kv_write": {
            "llmtrace.kv.tokens_written": s.kv_tokens_written,
            "llmtrace.kv.bytes_written": s.kv_tokens_written * facts.kv_bytes_per_token,
            "llmtrace.kv.bytes_per_token": facts.kv_bytes_per_token,
        },
        "cache.block_allocation": {
            "llmtrace.blocks.allocated": s.blocks_allocated,
            "llmtrace.blocks.block_size": facts.block_size,
            "llmtrace.blocks.pool_blocks": facts.num_blocks,
            "llmtrace.blocks.free_after": free_blocks,
            "llmtrace.blocks.utilization": round(s.peak_utilization, 4),
            "llmtrace.blocks.preemptions": s.preemptions,
        },
        "cache.eviction": {
            "llmtrace.eviction.policy": facts.eviction_policy,
            "llmtrace.eviction.blocks_evicted": s.blocks_evicted,
            "llmtrace.eviction.watermark": facts.watermark,
            "llmtrace.eviction.pressure": round(s.pressure_at_admission, 4),
        },
        "cache.host_offload": {
            "llmtrace.offload.blocks_out": s.offload_out,
            "llmtrace.offload.blocks_in": s.offload_in,
            "llmtrace.offload.bytes": s.offload_bytes,
            "llmtrace.offload.ms": round(s.offload_ms, 3),
            "llmtrace.offload.enabled": facts.host_tier_blocks > 0,
        },
        "forward.embedding": {
            "llmtrace.embedding.tokens": s.embedded_tokens,
            "llmtrace.embedding.hidden_size": facts.hidden_size,
            "llmtrace.embedding.dtype": facts.dtype,
            "llmtrace.embedding.ms": round(sec.get("embedding", 0.0), 3),
        },
        "forward.positional": {
            "llmtrace.rope.theta": facts.rope_theta,
            "llmtrace.rope.max_position": s.max_position,
            "llmtrace.rope.trained_context": facts.trained_context,
            "llmtrace.rope.beyond_trained": s.max_position >= facts.trained_context,
        },
        "forward.attention": {
            "llmtrace.attention.backend": facts.attention_backend,
            "llmtrace.attention.reason": facts.attention_reason,
            "llmtrace.attention.fallback": facts.attention_fallback,
            "llmtrace.attention.kv_len_max": s.kv_len_max,
            "llmtrace.attention.kernel_path": facts.attention_path,
            "llmtrace.attention.ms": round(sec.get("attention", 0.0), 3),
        },
        "forward.attention_variant": {
            "llmtrace.attention.heads": facts.num_heads,
            "llmtrace.attention.kv_heads": facts.num_kv_heads,
            "llmtrace.attention.gqa_ratio": facts.num_heads // facts.num_kv_heads,
            "llmtrace.attention.window": 0,
            "llmtrace.attention.tokens_outside_window": 0,
        },
        "forward.moe_routing": {
            "llmtrace.moe.experts": 0,
            "llmtrace.moe.top_k": 0,
            "llmtrace.moe.load_imbalance": 0.0,
        },
        "forward.feed_forward": {
            "llmtrace.ffn.intermediate_size": facts.intermediate_size,
            "llmtrace.ffn.activation": "silu (SwiGLU)",
            "llmtrace.ffn.ms": round(sec.get("feed_forward", 0.0), 3),
        },
        "forward.prefill": {
            "llmtrace.prefill.tokens": s.prefill_tokens,
            "llmtrace.prefill.chunks": s.prefill_chunks,
            "llmtrace.prefill.ms": round(s.prefill_ms, 3),
            "llmtrace.prefill.tokens_per_s": round(prefill_tps, 1),
        },
        "forward.decode": {
            "llmtrace.decode.steps": s.decode_steps,
            "llmtrace.decode.ms": round(s.decode_ms, 3),
            "llmtrace.decode.tpot_ms": round(tpot, 3),
            "llmtrace.decode.kv_bytes_read": s.kv_bytes_read,
        },
        "forward.batching": {
            "llmtrace.batch.size_mean": round(s.batch_size_sum / s.batch_steps, 3) if s.batch_steps else 0.0,
            "llmtrace.batch.size_max": s.batch_size_max,
            "llmtrace.batch.composition_hash": s.composition_hash(),
            "llmtrace.batch.invariant_mode": facts.invariant,
            "llmtrace.batch.queue_ms": round(_ms(s.self_time.queue_ns), 3),
            "llmtrace.batch.wait_ms": round(_ms(s.self_time.wait_ns), 3),
        },
        "gen.lm_head": {
            "llmtrace.lm_head.vocab": facts.vocab_size,
            "llmtrace.lm_head.params": facts.lm_head_params,
            "llmtrace.lm_head.share_of_params": round(facts.lm_head_params / facts.num_params, 4),
            "llmtrace.lm_head.ms": round(sec.get("lm_head", 0.0), 3),
        },
        "gen.speculation": {
            "llmtrace.spec.method": seq.request.params.speculation.method,
            "llmtrace.spec.k": seq.request.params.speculation.k if seq.request.params.speculation.method != "none" else 0,
            "llmtrace.spec.drafted": s.spec_drafted,
            "llmtrace.spec.accepted": s.spec_accepted,
            "llmtrace.spec.acceptance_rate": round(s.spec_accepted / s.spec_drafted, 4) if s.spec_drafted else 0.0,
            "llmtrace.spec.batch_size": round(s.spec_batch_sum / s.spec_steps, 3) if s.spec_steps else 0.0,
        },
    }


def emit(seq: Sequence, facts: EngineFacts, free_blocks: int, pipeline: Any, status: str = "ok") -> None:
    """Record the pass's stage spans under ``seq.request.pass_span`` and set its summary values."""
    pass_span = seq.request.pass_span
    if pass_span is None:
        return
    from llmtrace.tracer import recording as rec

    s = seq.stats
    values = stage_values(seq, facts, free_blocks)
    own = exclusive(seq, pipeline)
    before_first = s.self_time.ttft_ns or {}
    forward = s.windows.get("forward", [seq.arrival_ns, seq.arrival_ns])
    for stage_id, vals in values.items():
        start, end = s.windows.get(stage_id, forward)
        vals.update(timing_values(stage_id, own.get(stage_id, 0), before_first.get(stage_id, 0)))
        if stage_id == "cache.eviction" and not s.blocks_evicted:
            vals.update({IDLE: True, COUNTED_IN_VALUE: None})
        if vals[IDLE]:
            end = start  # a stage that did nothing draws no bar
        rec.record_stage(stage_id, start_ns=start, end_ns=end, values=vals, parent=pass_span)
    anchor = s.first_token_ns or forward[1]
    for stage_id, vals in pipeline.stage_values(seq.gen).items():
        ns = own.get(stage_id, 0)
        vals.update(timing_values(stage_id, ns, before_first.get(stage_id, 0)))
        if stage_id == "gen.detokenization" and s.self_time.first_text_at_ns and s.self_time.ttft_at_ns:
            vals["llmtrace.detok.first_text_delay_ms"] = round(
                _ms(s.self_time.first_text_at_ns - s.self_time.ttft_at_ns), 3)
        rec.record_stage(stage_id, start_ns=anchor, end_ns=anchor + ns, values=vals, parent=pass_span)
    params = seq.request.params
    ttft = _ms(s.first_token_ns - seq.arrival_ns) if s.first_token_ns else None
    n_out = seq.num_output_tokens
    tpot = _ms(s.last_token_ns - s.first_token_ns) / (n_out - 1) if n_out > 1 else None
    pass_span.set_many(
        {
            "gen_ai.response.model": facts.model_name,
            "gen_ai.usage.input_tokens": seq.num_prompt_tokens,
            "gen_ai.usage.output_tokens": n_out,
            "gen_ai.usage.cache_read.input_tokens": seq.num_cached_tokens,
            "gen_ai.response.finish_reasons": [seq.finish_reason] if seq.finish_reason else [],
            "gen_ai.request.temperature": params.temperature,
            "gen_ai.request.top_p": params.top_p,
            "gen_ai.request.seed": params.seed,
            "gen_ai.request.max_tokens": params.max_tokens,
            "llmtrace.ttft_ms": round(ttft, 3) if ttft is not None else None,
            "llmtrace.tpot_ms": round(tpot, 3) if tpot is not None else None,
            "llmtrace.batch.composition_hash": s.composition_hash(),
            "llmtrace.engine.queue_wait_ms": round(_ms(s.windows.get("cache.prefix_match", [seq.arrival_ns])[0]
                                                       - seq.arrival_ns), 3),
            "llmtrace.engine.status": status,
            # when the step that sampled the first token ended, from the pass's arrival: with the server's
            # TTFT (when the HTTP side saw the token) it measures the delivery part of the TTFT breakdown
            "llmtrace.engine.ttft_ms": round(_ms(s.self_time.ttft_at_ns - seq.arrival_ns), 3)
            if s.self_time.ttft_at_ns else None,
        }
    )
