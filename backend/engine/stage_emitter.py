"""Turns a finished sequence's stats into its stage spans (Cache & reuse, Forward pass, Generation) and the
summary values of its pass span. Runs once per pass, when the sequence finishes or is aborted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmtrace.backend.engine.pass_telemetry import FORWARD_WINDOW
from llmtrace.backend.engine.self_time import COUNTED_IN, exclusive
from llmtrace.backend.engine.sequence import Sequence
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
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
    prefill_path: str = ""  # the arithmetic of each phase (LlamaModel.path_labels), chosen for the host
    decode_path: str = ""


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
        S.CACHE_PREFIX_MATCH: {
            N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: seq.num_cached_tokens,
            N.PREFIX_HIT_TOKENS: s.prefix_hit_tokens,
            N.PREFIX_FIRST_MISS_TOKEN: s.prefix_first_miss,
            N.PREFIX_KEY: s.prefix_key,
            N.PREFIX_ENABLED: facts.prefix_cache,
        },
        S.CACHE_KV_WRITE: {
            N.KV_TOKENS_WRITTEN: s.kv_tokens_written,
            N.KV_BYTES_WRITTEN: s.kv_tokens_written * facts.kv_bytes_per_token,
            N.KV_BYTES_PER_TOKEN: facts.kv_bytes_per_token,
        },
        S.CACHE_BLOCK_ALLOCATION: {
            N.BLOCKS_ALLOCATED: s.blocks_allocated,
            N.BLOCKS_BLOCK_SIZE: facts.block_size,
            N.BLOCKS_POOL_BLOCKS: facts.num_blocks,
            N.BLOCKS_FREE_AFTER: free_blocks,
            N.BLOCKS_UTILIZATION: round(s.peak_utilization, 4),
            N.BLOCKS_PREEMPTIONS: s.preemptions,
        },
        S.CACHE_EVICTION: {
            N.EVICTION_POLICY: facts.eviction_policy,
            N.EVICTION_BLOCKS_EVICTED: s.blocks_evicted,
            N.EVICTION_WATERMARK: facts.watermark,
            N.EVICTION_PRESSURE: round(s.pressure_at_admission, 4),
        },
        S.CACHE_HOST_OFFLOAD: {
            N.OFFLOAD_BLOCKS_OUT: s.offload_out,
            N.OFFLOAD_BLOCKS_IN: s.offload_in,
            N.OFFLOAD_BYTES: s.offload_bytes,
            N.OFFLOAD_MS: round(s.offload_ms, 3),
            N.OFFLOAD_ENABLED: facts.host_tier_blocks > 0,
        },
        S.FORWARD_EMBEDDING: {
            N.EMBEDDING_TOKENS: s.embedded_tokens,
            N.EMBEDDING_HIDDEN_SIZE: facts.hidden_size,
            N.EMBEDDING_DTYPE: facts.dtype,
            N.EMBEDDING_MS: round(sec.get("embedding", 0.0), 3),
        },
        S.FORWARD_POSITIONAL: {
            N.ROPE_THETA: facts.rope_theta,
            N.ROPE_MAX_POSITION: s.max_position,
            N.ROPE_TRAINED_CONTEXT: facts.trained_context,
            N.ROPE_BEYOND_TRAINED: s.max_position >= facts.trained_context,
        },
        S.FORWARD_ATTENTION: {
            N.ATTENTION_BACKEND: facts.attention_backend,
            N.ATTENTION_REASON: facts.attention_reason,
            N.ATTENTION_FALLBACK: facts.attention_fallback,
            N.ATTENTION_KV_LEN_MAX: s.kv_len_max,
            N.ATTENTION_KERNEL_PATH: facts.attention_path,
            N.ATTENTION_MS: round(sec.get("attention", 0.0), 3),
        },
        S.FORWARD_ATTENTION_VARIANT: {
            N.ATTENTION_HEADS: facts.num_heads,
            N.ATTENTION_KV_HEADS: facts.num_kv_heads,
            N.ATTENTION_GQA_RATIO: facts.num_heads // facts.num_kv_heads,
            N.ATTENTION_WINDOW: 0,
            N.ATTENTION_TOKENS_OUTSIDE_WINDOW: 0,
        },
        S.FORWARD_MOE_ROUTING: {
            N.MOE_EXPERTS: 0,
            N.MOE_TOP_K: 0,
            N.MOE_LOAD_IMBALANCE: 0.0,
        },
        S.FORWARD_FEED_FORWARD: {
            N.FFN_INTERMEDIATE_SIZE: facts.intermediate_size,
            N.FFN_ACTIVATION: "silu (SwiGLU)",
            N.FFN_MS: round(sec.get("feed_forward", 0.0), 3),
        },
        S.FORWARD_PREFILL: {
            N.PREFILL_TOKENS: s.prefill_tokens,
            N.PREFILL_CHUNKS: s.prefill_chunks,
            N.PREFILL_MS: round(s.prefill_ms, 3),
            N.PREFILL_TOKENS_PER_S: round(prefill_tps, 1),
            N.PREFILL_PATH: facts.prefill_path,
            N.PREFILL_CPU_MS: round(s.prefill_cpu_ns / 1e6, 3),
            N.PREFILL_CPU_WAIT_MS: round(s.prefill_cpu_wait_ns / 1e6, 3) if s.prefill_cpu_wait_ns is not None
            else None,
        },
        S.FORWARD_DECODE: {
            N.DECODE_STEPS: s.decode_steps,
            N.DECODE_MS: round(s.decode_ms, 3),
            N.DECODE_TPOT_MS: round(tpot, 3),
            N.DECODE_KV_BYTES_READ: s.kv_bytes_read,
            N.DECODE_PATH: facts.decode_path,
        },
        S.FORWARD_BATCHING: {
            N.BATCH_SIZE_MEAN: round(s.batch_size_sum / s.batch_steps, 3) if s.batch_steps else 0.0,
            N.BATCH_SIZE_MAX: s.batch_size_max,
            N.BATCH_COMPOSITION_HASH: s.composition_hash(),
            N.BATCH_INVARIANT_MODE: facts.invariant,
            N.BATCH_QUEUE_MS: round(_ms(s.self_time.queue_ns), 3),
            N.BATCH_WAIT_MS: round(_ms(s.self_time.wait_ns), 3),
        },
        S.GEN_LM_HEAD: {
            N.LM_HEAD_VOCAB: facts.vocab_size,
            N.LM_HEAD_PARAMS: facts.lm_head_params,
            N.LM_HEAD_SHARE_OF_PARAMS: round(facts.lm_head_params / facts.num_params, 4),
            N.LM_HEAD_MS: round(sec.get("lm_head", 0.0), 3),
        },
        S.GEN_SPECULATION: {
            N.SPEC_METHOD: seq.request.params.speculation.method,
            N.SPEC_K: seq.request.params.speculation.k if seq.request.params.speculation.method != "none" else 0,
            N.SPEC_DRAFTED: s.spec_drafted,
            N.SPEC_ACCEPTED: s.spec_accepted,
            N.SPEC_ACCEPTANCE_RATE: round(s.spec_accepted / s.spec_drafted, 4) if s.spec_drafted else 0.0,
            N.SPEC_BATCH_SIZE: round(s.spec_batch_sum / s.spec_steps, 3) if s.spec_steps else 0.0,
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
    forward = s.windows.get(FORWARD_WINDOW, [seq.arrival_ns, seq.arrival_ns])
    for stage_id, vals in values.items():
        start, end = s.windows.get(stage_id, forward)
        vals.update(timing_values(stage_id, own.get(stage_id, 0), before_first.get(stage_id, 0)))
        if stage_id == S.CACHE_EVICTION and not s.blocks_evicted:
            vals.update({IDLE: True, COUNTED_IN_VALUE: None})
        if vals[IDLE]:
            end = start  # a stage that did nothing draws no bar
        rec.record_stage(stage_id, start_ns=start, end_ns=end, values=vals, parent=pass_span)
    anchor = s.first_token_ns or forward[1]
    for stage_id, vals in pipeline.stage_values(seq.gen).items():
        ns = own.get(stage_id, 0)
        vals.update(timing_values(stage_id, ns, before_first.get(stage_id, 0)))
        if stage_id == S.GEN_DETOKENIZATION and s.self_time.first_text_at_ns and s.self_time.ttft_at_ns:
            vals[N.DETOK_FIRST_TEXT_DELAY_MS] = round(
                _ms(s.self_time.first_text_at_ns - s.self_time.ttft_at_ns), 3)
        rec.record_stage(stage_id, start_ns=anchor, end_ns=anchor + ns, values=vals, parent=pass_span)
    params = seq.request.params
    ttft = _ms(s.first_token_ns - seq.arrival_ns) if s.first_token_ns else None
    n_out = seq.num_output_tokens
    tpot = _ms(s.last_token_ns - s.first_token_ns) / (n_out - 1) if n_out > 1 else None
    pass_span.set_many(
        {
            N.GEN_AI_RESPONSE_MODEL: facts.model_name,
            N.GEN_AI_USAGE_INPUT_TOKENS: seq.num_prompt_tokens,
            N.GEN_AI_USAGE_OUTPUT_TOKENS: n_out,
            N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: seq.num_cached_tokens,
            N.GEN_AI_RESPONSE_FINISH_REASONS: [seq.finish_reason] if seq.finish_reason else [],
            N.GEN_AI_REQUEST_TEMPERATURE: params.temperature,
            N.GEN_AI_REQUEST_TOP_P: params.top_p,
            N.GEN_AI_REQUEST_SEED: params.seed,
            N.GEN_AI_REQUEST_MAX_TOKENS: params.max_tokens,
            N.TTFT_MS: round(ttft, 3) if ttft is not None else None,
            N.TPOT_MS: round(tpot, 3) if tpot is not None else None,
            N.BATCH_COMPOSITION_HASH: s.composition_hash(),
            N.ENGINE_QUEUE_WAIT_MS: round(_ms(s.windows.get(S.CACHE_PREFIX_MATCH, [seq.arrival_ns])[0]
                                                       - seq.arrival_ns), 3),
            N.ENGINE_STATUS: status,
            # when the step that sampled the first token ended, from the pass's arrival: with the server's
            # TTFT (when the HTTP side saw the token) it measures the delivery part of the TTFT breakdown
            N.ENGINE_TTFT_MS: round(_ms(s.self_time.ttft_at_ns - seq.arrival_ns), 3)
            if s.self_time.ttft_at_ns else None,
        }
    )
