"""A constant for every span value name the registry declares (emitters use these, never a literal).

GENERATED from the stage registry by ``python -m llmtrace.tracer.registry.names_gen``: do not edit by hand;
change the catalog (tracer/registry/catalog/*.py, pass_values.py, stages.py) and run it again.
"""

from __future__ import annotations

from typing import Final

# ── the pass span (pass_values.py)
SIDE: Final = "llmtrace.side"  # str; pass span
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"  # str; pass span
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"  # str; pass span
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"  # str; pass span
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"  # float; pass span
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"  # float; pass span
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"  # int; pass span
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"  # int; pass span
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"  # int tokens; pass span
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"  # float; pass span
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"  # float; pass span
GEN_AI_OUTPUT_TYPE: Final = "gen_ai.output.type"  # str; pass span
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"  # str; pass span
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"  # str; pass span
SESSION_ID: Final = "session.id"  # str; pass span
USER_ID: Final = "user.id"  # str; pass span
SESSION_INFERRED: Final = "llmtrace.session.inferred"  # bool; pass span
STREAM_REQUESTED: Final = "llmtrace.stream.requested"  # bool; pass span
API: Final = "llmtrace.api"  # str; pass span
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"  # str; pass span
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"  # str; pass span
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"  # str[]; pass span
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"  # int tokens; pass span
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"  # int tokens; pass span
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"  # int tokens; pass span
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"  # int tokens; pass span
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"  # int tokens; pass span
TTFT_MS: Final = "llmtrace.ttft_ms"  # float ms; pass span
TPOT_MS: Final = "llmtrace.tpot_ms"  # float ms; pass span
GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN: Final = "gen_ai.latency.time_to_first_token"  # float s; pass span
GEN_AI_LATENCY_TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"  # float s; pass span
TTFT_CPU_WAIT_MS: Final = "llmtrace.ttft.cpu_wait_ms"  # float ms; pass span
STATUS: Final = "llmtrace.status"  # str; pass span
SERVER_SPAN_ID: Final = "llmtrace.server.span_id"  # str; pass span
RESPONSE_UNDECODED_ENCODING: Final = "llmtrace.response.undecoded_encoding"  # str; pass span
ADAPTER_FAULT: Final = "llmtrace.adapter.fault"  # str; pass span
RESPONSE_UNPARSED_BYTES: Final = "llmtrace.response.unparsed_bytes"  # int bytes; pass span
CLIENT_RETRY_COUNT: Final = "llmtrace.client.retry_count"  # int; pass span
UNOBSERVED_STAGES: Final = "llmtrace.unobserved_stages"  # str[]; pass span
MAPPED_FROM: Final = "llmtrace.mapped_from"  # str; pass span
USAGE_CACHE_CONVENTION: Final = "llmtrace.usage.cache_convention"  # str; pass span
LATENCY_UNIT: Final = "llmtrace.latency.unit"  # str; pass span
TTFT_SOURCE: Final = "llmtrace.ttft.source"  # str; pass span
FINISH_REASON: Final = "llmtrace.finish_reason"  # str; pass span
CONTENT_CAPTURE: Final = "llmtrace.content_capture"  # str; pass span
FINISH_REASONS_RAW: Final = "llmtrace.finish_reasons.raw"  # str; pass span
JOIN_BY: Final = "llmtrace.join.by"  # str; pass span
JOIN_KEY: Final = "llmtrace.join.key"  # str; pass span
JOIN_TRACE_ID: Final = "llmtrace.join.trace_id"  # str; pass span
JOIN_PARENT_SPAN_ID: Final = "llmtrace.join.parent_span_id"  # str; pass span
USAGE_SOURCE: Final = "llmtrace.usage.source"  # str; pass span
USAGE_REQUESTED: Final = "llmtrace.usage.requested"  # bool; pass span
USAGE_REPORTED: Final = "llmtrace.usage.reported"  # bool; pass span
USAGE_ESTIMATED: Final = "llmtrace.usage.estimated"  # bool; pass span
USAGE_ESTIMATED_INPUT_TOKENS: Final = "llmtrace.usage.estimated_input_tokens"  # int tokens; pass span
USAGE_ESTIMATED_OUTPUT_TOKENS: Final = "llmtrace.usage.estimated_output_tokens"  # int tokens; pass span
USAGE_ESTIMATOR: Final = "llmtrace.usage.estimator"  # str; pass span
USAGE_PROBLEMS: Final = "llmtrace.usage.problems"  # str[]; pass span
REPLICA_ID: Final = "llmtrace.replica.id"  # str; pass span
ENGINE_BOOT_ID: Final = "llmtrace.engine.boot_id"  # str; pass span
ADMISSION_QUEUE_WAIT_MS: Final = "llmtrace.admission.queue_wait_ms"  # float ms; pass span
ENGINE_QUEUE_WAIT_MS: Final = "llmtrace.engine.queue_wait_ms"  # float ms; pass span
ENGINE_STATUS: Final = "llmtrace.engine.status"  # str; pass span
ENGINE_TTFT_MS: Final = "llmtrace.engine.ttft_ms"  # float ms; pass span
BATCH_COMPOSITION_HASH: Final = "llmtrace.batch.composition_hash"  # str; pass span
ROUTING_MODEL_DIFFERS: Final = "llmtrace.routing.model_differs"  # bool; pass span
METERS_COST_USD: Final = "llmtrace.meters.cost_usd"  # float USD; pass span
METERS_TRACE_COST_USD: Final = "llmtrace.meters.trace_cost_usd"  # float USD; pass span
METERS_USAGE_CONSISTENT: Final = "llmtrace.meters.usage_consistent"  # bool; pass span
PROMPT_HASH: Final = "llmtrace.prompt.hash"  # str; pass span
OUTPUT_HASH: Final = "llmtrace.output.hash"  # str; pass span
PROMPT_SEGMENTS: Final = "llmtrace.prompt.segments"  # str; pass span
PROMPT_TEXT: Final = "llmtrace.prompt.text"  # str; pass span
OUTPUT_TEXT: Final = "llmtrace.output.text"  # str; pass span
OUTPUT_SHAPE: Final = "llmtrace.output.shape"  # str; pass span
OUTPUT_PARSES: Final = "llmtrace.output.parses"  # bool; pass span
OUTPUT_STRUCTURED_GUESS: Final = "llmtrace.output.structured_guess"  # bool; pass span
OUTPUT_ASKED_IN_WORDS: Final = "llmtrace.output.asked_in_words"  # str; pass span
USAGE_RAW_PREFIX: Final = "llmtrace.usage.raw."  # family prefix: the suffix is the provider's own field

# ── every stage span (stages.py COMMON_VALUES)
STAGE_SELF_MS: Final = "llmtrace.stage.self_ms"  # float ms; every stage
STAGE_TTFT_MS: Final = "llmtrace.stage.ttft_ms"  # float ms; every stage
STAGE_IDLE: Final = "llmtrace.stage.idle"  # bool; every stage
STAGE_COUNTED_IN: Final = "llmtrace.stage.counted_in"  # str; every stage
OBSERVED: Final = "llmtrace.observed"  # bool; every stage
UNOBSERVED_REASON: Final = "llmtrace.unobserved_reason"  # str; every stage

# ── stage 1 arrival.connection (catalog/arrival.py)
SERVER_ADDRESS: Final = "server.address"  # str; arrival.connection
SERVER_PORT: Final = "server.port"  # int; arrival.connection
CONNECTION_REUSED: Final = "llmtrace.connection.reused"  # bool; arrival.connection
CONNECTION_CONNECT_MS: Final = "llmtrace.connection.connect_ms"  # float ms; arrival.connection

# ── stage 2 arrival.admission (catalog/arrival.py)
ADMISSION_DECISION: Final = "llmtrace.admission.decision"  # str; arrival.admission
ADMISSION_QUEUE_DEPTH: Final = "llmtrace.admission.queue_depth"  # int requests; arrival.admission
ADMISSION_RUNNING: Final = "llmtrace.admission.running"  # int requests; arrival.admission
ADMISSION_MAX_RUNNING: Final = "llmtrace.admission.max_running"  # int requests; arrival.admission

# ── stage 3 arrival.model_routing (catalog/arrival.py)
ROUTING_RULE: Final = "llmtrace.routing.rule"  # str; arrival.model_routing
ROUTING_FALLBACK: Final = "llmtrace.routing.fallback"  # bool; arrival.model_routing

# ── stage 4 arrival.replica_selection (catalog/arrival.py)
REPLICA_POLICY: Final = "llmtrace.replica.policy"  # str; arrival.replica_selection
REPLICA_CANDIDATES: Final = "llmtrace.replica.candidates"  # int replicas; arrival.replica_selection
REPLICA_EXPECTED_HIT_TOKENS: Final = "llmtrace.replica.expected_hit_tokens"  # int tokens; arrival.replica_selection
REPLICA_EXPECTED_HIT_BLOCKS: Final = "llmtrace.replica.expected_hit_blocks"  # int blocks; arrival.replica_selection
REPLICA_BEST_HIT_BLOCKS: Final = "llmtrace.replica.best_hit_blocks"  # int blocks; arrival.replica_selection
REPLICA_BEST_ID: Final = "llmtrace.replica.best_id"  # str; arrival.replica_selection
REPLICA_BLOCKS_LOST: Final = "llmtrace.replica.blocks_lost"  # int blocks; arrival.replica_selection
REPLICA_TOTAL_BLOCKS: Final = "llmtrace.replica.total_blocks"  # int blocks; arrival.replica_selection
REPLICA_ROLE: Final = "llmtrace.replica.role"  # str; arrival.replica_selection
REPLICA_BLOCK_TOKENS: Final = "llmtrace.replica.block_tokens"  # int tokens; arrival.replica_selection

# ── stage 5 arrival.stream_setup (catalog/arrival.py)
STREAM_PROTOCOL: Final = "llmtrace.stream.protocol"  # str; arrival.stream_setup
STREAM_FIRST_BYTE_MS: Final = "llmtrace.stream.first_byte_ms"  # float ms; arrival.stream_setup

# ── stage 6 intake.normalization (catalog/intake.py)
NORMALIZATION_FORM: Final = "llmtrace.normalization.form"  # str; intake.normalization
NORMALIZATION_STRIP: Final = "llmtrace.normalization.strip"  # bool; intake.normalization
NORMALIZATION_CHARS_CHANGED: Final = "llmtrace.normalization.chars_changed"  # int chars; intake.normalization
NORMALIZATION_INVISIBLE_CHARS: Final = "llmtrace.normalization.invisible_chars"  # int chars; intake.normalization
NORMALIZATION_NBSP: Final = "llmtrace.normalization.nbsp"  # int chars; intake.normalization
NORMALIZATION_CONFUSABLES: Final = "llmtrace.normalization.confusables"  # int chars; intake.normalization
NORMALIZATION_CHANGED_CLASSES: Final = "llmtrace.normalization.changed_classes"  # str[]; intake.normalization
NORMALIZATION_MEANING_CHARS: Final = "llmtrace.normalization.meaning_chars"  # int chars; intake.normalization

# ── stage 7 intake.system_prompt (catalog/intake.py)
SYSTEM_CHARS: Final = "llmtrace.system.chars"  # int chars; intake.system_prompt
SYSTEM_HASH: Final = "llmtrace.system.hash"  # str; intake.system_prompt
SYSTEM_VOLATILE_OFFSET: Final = "llmtrace.system.volatile_offset"  # int chars; intake.system_prompt
SYSTEM_VOLATILE_KIND: Final = "llmtrace.system.volatile_kind"  # str; intake.system_prompt
SYSTEM_VOLATILE_FIELD: Final = "llmtrace.system.volatile_field"  # str; intake.system_prompt
SYSTEM_CHANGED_OFFSET: Final = "llmtrace.system.changed_offset"  # int chars; intake.system_prompt
SYSTEM_VOLATILE_TEXT: Final = "llmtrace.system.volatile_text"  # str; intake.system_prompt

# ── stage 8 intake.context_ordering (catalog/intake.py)
ORDERING_ITEMS: Final = "llmtrace.ordering.items"  # int items; intake.context_ordering
ORDERING_STRATEGY: Final = "llmtrace.ordering.strategy"  # str; intake.context_ordering
ORDERING_KEY_POSITIONS: Final = "llmtrace.ordering.key_positions"  # float[] 0..1; intake.context_ordering
ORDERING_MIDDLE_ITEMS: Final = "llmtrace.ordering.middle_items"  # int items; intake.context_ordering

# ── stage 9 intake.evidence_formatting (catalog/intake.py)
EVIDENCE_CHUNKS_IN: Final = "llmtrace.evidence.chunks_in"  # int chunks; intake.evidence_formatting
EVIDENCE_CHUNKS_OUT: Final = "llmtrace.evidence.chunks_out"  # int chunks; intake.evidence_formatting
EVIDENCE_DUPLICATES_REMOVED: Final = "llmtrace.evidence.duplicates_removed"  # int chunks; intake.evidence_formatting
EVIDENCE_ID_SCHEME: Final = "llmtrace.evidence.id_scheme"  # str; intake.evidence_formatting
EVIDENCE_DELIMITER: Final = "llmtrace.evidence.delimiter"  # str; intake.evidence_formatting
EVIDENCE_UNLABELLED: Final = "llmtrace.evidence.unlabelled"  # int items; intake.evidence_formatting
EVIDENCE_DUPLICATES_SENT: Final = "llmtrace.evidence.duplicates_sent"  # int chunks; intake.evidence_formatting
EVIDENCE_OBSERVED: Final = "llmtrace.evidence.observed"  # str; intake.evidence_formatting
EVIDENCE_PASSAGES_HASH: Final = "llmtrace.evidence.passages_hash"  # str; intake.evidence_formatting
EVIDENCE_PLACEMENT: Final = "llmtrace.evidence.placement"  # str; intake.evidence_formatting

# ── stage 10 intake.chat_template (catalog/intake.py)
TEMPLATE_HASH: Final = "llmtrace.template.hash"  # str; intake.chat_template
TEMPLATE_MATCHES_MODEL: Final = "llmtrace.template.matches_model"  # bool; intake.chat_template
TEMPLATE_RENDERED_CHARS: Final = "llmtrace.template.rendered_chars"  # int chars; intake.chat_template
TEMPLATE_SEGMENT_HASHES: Final = "llmtrace.template.segment_hashes"  # str[]; intake.chat_template

# ── stage 11 intake.tokenization (catalog/intake.py)
TOKENIZATION_CHARS_PER_TOKEN: Final = "llmtrace.tokenization.chars_per_token"  # float chars; intake.tokenization
TOKENIZATION_SPECIAL_TOKENS: Final = "llmtrace.tokenization.special_tokens"  # int tokens; intake.tokenization
TOKENIZATION_BLOCK_HASHES: Final = "llmtrace.tokenization.block_hashes"  # str[]; intake.tokenization

# ── stage 12 cache.prefix_match (catalog/cache.py)
PREFIX_HIT_TOKENS: Final = "llmtrace.prefix.hit_tokens"  # int tokens; cache.prefix_match
PREFIX_FIRST_MISS_TOKEN: Final = "llmtrace.prefix.first_miss_token"  # int tokens; cache.prefix_match
PREFIX_KEY: Final = "llmtrace.prefix.key"  # str; cache.prefix_match
PREFIX_SOURCE: Final = "llmtrace.prefix.source"  # str; cache.prefix_match
DIVERGENCE_TEMPLATE: Final = "llmtrace.divergence.template"  # str; cache.prefix_match
DIVERGENCE_PROMPT_TOKENS_EST: Final = "llmtrace.divergence.prompt_tokens_est"  # int tokens; cache.prefix_match
DIVERGENCE_SEGMENT: Final = "llmtrace.divergence.segment"  # str; cache.prefix_match
DIVERGENCE_CHAR_OFFSET: Final = "llmtrace.divergence.char_offset"  # int chars; cache.prefix_match
DIVERGENCE_SEGMENT_OFFSET: Final = "llmtrace.divergence.segment_offset"  # int chars; cache.prefix_match
DIVERGENCE_TOKEN_OFFSET: Final = "llmtrace.divergence.token_offset"  # int tokens; cache.prefix_match
DIVERGENCE_LENGTH: Final = "llmtrace.divergence.length"  # int chars; cache.prefix_match
DIVERGENCE_CLASS: Final = "llmtrace.divergence.class"  # str; cache.prefix_match
DIVERGENCE_SHARED_PREFIX_TOKENS: Final = "llmtrace.divergence.shared_prefix_tokens"  # int tokens; cache.prefix_match
DIVERGENCE_REUSABLE_AFTER_TOKENS: Final = "llmtrace.divergence.reusable_after_tokens"  # int tokens; cache.prefix_match
CACHE_MISS_REASON: Final = "llmtrace.cache.miss_reason"  # str; cache.prefix_match
CACHE_MISSED_TOKENS: Final = "llmtrace.cache.missed_tokens"  # int tokens; cache.prefix_match
PREFIX_ENABLED: Final = "llmtrace.prefix.enabled"  # bool; cache.prefix_match
PREFIX_HIT_BLOCKS: Final = "llmtrace.prefix.hit_blocks"  # int blocks; cache.prefix_match
PREFIX_TOTAL_BLOCKS: Final = "llmtrace.prefix.total_blocks"  # int blocks; cache.prefix_match

# ── stage 13 cache.kv_write (catalog/cache.py)
KV_TOKENS_WRITTEN: Final = "llmtrace.kv.tokens_written"  # int tokens; cache.kv_write
KV_BYTES_WRITTEN: Final = "llmtrace.kv.bytes_written"  # int bytes; cache.kv_write
KV_BYTES_PER_TOKEN: Final = "llmtrace.kv.bytes_per_token"  # int bytes; cache.kv_write

# ── stage 14 cache.block_allocation (catalog/cache.py)
BLOCKS_ALLOCATED: Final = "llmtrace.blocks.allocated"  # int blocks; cache.block_allocation
BLOCKS_BLOCK_SIZE: Final = "llmtrace.blocks.block_size"  # int tokens; cache.block_allocation
BLOCKS_FREE_AFTER: Final = "llmtrace.blocks.free_after"  # int blocks; cache.block_allocation
BLOCKS_POOL_BLOCKS: Final = "llmtrace.blocks.pool_blocks"  # int blocks; cache.block_allocation
BLOCKS_UTILIZATION: Final = "llmtrace.blocks.utilization"  # float 0..1; cache.block_allocation
BLOCKS_PREEMPTIONS: Final = "llmtrace.blocks.preemptions"  # int; cache.block_allocation

# ── stage 15 cache.eviction (catalog/cache.py)
EVICTION_POLICY: Final = "llmtrace.eviction.policy"  # str; cache.eviction
EVICTION_BLOCKS_EVICTED: Final = "llmtrace.eviction.blocks_evicted"  # int blocks; cache.eviction
EVICTION_WATERMARK: Final = "llmtrace.eviction.watermark"  # float 0..1; cache.eviction
EVICTION_PRESSURE: Final = "llmtrace.eviction.pressure"  # float 0..1; cache.eviction

# ── stage 16 cache.host_offload (catalog/cache.py)
OFFLOAD_BLOCKS_OUT: Final = "llmtrace.offload.blocks_out"  # int blocks; cache.host_offload
OFFLOAD_BLOCKS_IN: Final = "llmtrace.offload.blocks_in"  # int blocks; cache.host_offload
OFFLOAD_BYTES: Final = "llmtrace.offload.bytes"  # int bytes; cache.host_offload
OFFLOAD_MS: Final = "llmtrace.offload.ms"  # float ms; cache.host_offload
OFFLOAD_ENABLED: Final = "llmtrace.offload.enabled"  # bool; cache.host_offload
OFFLOAD_SOURCE: Final = "llmtrace.offload.source"  # str; cache.host_offload

# ── stage 17 forward.embedding (catalog/forward.py)
EMBEDDING_TOKENS: Final = "llmtrace.embedding.tokens"  # int tokens; forward.embedding
EMBEDDING_HIDDEN_SIZE: Final = "llmtrace.embedding.hidden_size"  # int; forward.embedding
EMBEDDING_DTYPE: Final = "llmtrace.embedding.dtype"  # str; forward.embedding
EMBEDDING_MS: Final = "llmtrace.embedding.ms"  # float ms; forward.embedding

# ── stage 18 forward.positional (catalog/forward.py)
ROPE_THETA: Final = "llmtrace.rope.theta"  # float; forward.positional
ROPE_MAX_POSITION: Final = "llmtrace.rope.max_position"  # int tokens; forward.positional
ROPE_TRAINED_CONTEXT: Final = "llmtrace.rope.trained_context"  # int tokens; forward.positional
ROPE_BEYOND_TRAINED: Final = "llmtrace.rope.beyond_trained"  # bool; forward.positional

# ── stage 19 forward.attention (catalog/forward.py)
ATTENTION_BACKEND: Final = "llmtrace.attention.backend"  # str; forward.attention
ATTENTION_REASON: Final = "llmtrace.attention.reason"  # str; forward.attention
ATTENTION_FALLBACK: Final = "llmtrace.attention.fallback"  # bool; forward.attention
ATTENTION_KV_LEN_MAX: Final = "llmtrace.attention.kv_len_max"  # int tokens; forward.attention
ATTENTION_KERNEL_PATH: Final = "llmtrace.attention.kernel_path"  # str; forward.attention
ATTENTION_MS: Final = "llmtrace.attention.ms"  # float ms; forward.attention

# ── stage 20 forward.attention_variant (catalog/forward.py)
ATTENTION_HEADS: Final = "llmtrace.attention.heads"  # int; forward.attention_variant
ATTENTION_KV_HEADS: Final = "llmtrace.attention.kv_heads"  # int; forward.attention_variant
ATTENTION_GQA_RATIO: Final = "llmtrace.attention.gqa_ratio"  # int; forward.attention_variant
ATTENTION_WINDOW: Final = "llmtrace.attention.window"  # int tokens; forward.attention_variant
ATTENTION_TOKENS_OUTSIDE_WINDOW: Final = "llmtrace.attention.tokens_outside_window"  # int tokens; forward.attention_variant

# ── stage 21 forward.moe_routing (catalog/forward.py)
MOE_EXPERTS: Final = "llmtrace.moe.experts"  # int; forward.moe_routing
MOE_TOP_K: Final = "llmtrace.moe.top_k"  # int; forward.moe_routing
MOE_LOAD_IMBALANCE: Final = "llmtrace.moe.load_imbalance"  # float; forward.moe_routing

# ── stage 22 forward.feed_forward (catalog/forward.py)
FFN_INTERMEDIATE_SIZE: Final = "llmtrace.ffn.intermediate_size"  # int; forward.feed_forward
FFN_ACTIVATION: Final = "llmtrace.ffn.activation"  # str; forward.feed_forward
FFN_MS: Final = "llmtrace.ffn.ms"  # float ms; forward.feed_forward

# ── stage 23 forward.prefill (catalog/forward.py)
PREFILL_TOKENS: Final = "llmtrace.prefill.tokens"  # int tokens; forward.prefill
PREFILL_CHUNKS: Final = "llmtrace.prefill.chunks"  # int; forward.prefill
PREFILL_MS: Final = "llmtrace.prefill.ms"  # float ms; forward.prefill
PREFILL_TOKENS_PER_S: Final = "llmtrace.prefill.tokens_per_s"  # float tokens/s; forward.prefill
PREFILL_PATH: Final = "llmtrace.prefill.path"  # str; forward.prefill
PREFILL_CPU_MS: Final = "llmtrace.prefill.cpu_ms"  # float ms; forward.prefill
PREFILL_CPU_WAIT_MS: Final = "llmtrace.prefill.cpu_wait_ms"  # float ms; forward.prefill

# ── stage 24 forward.decode (catalog/forward.py)
DECODE_STEPS: Final = "llmtrace.decode.steps"  # int steps; forward.decode
DECODE_MS: Final = "llmtrace.decode.ms"  # float ms; forward.decode
DECODE_TPOT_MS: Final = "llmtrace.decode.tpot_ms"  # float ms; forward.decode
DECODE_KV_BYTES_READ: Final = "llmtrace.decode.kv_bytes_read"  # int bytes; forward.decode
DECODE_PATH: Final = "llmtrace.decode.path"  # str; forward.decode

# ── stage 25 forward.batching (catalog/forward.py)
BATCH_SIZE_MEAN: Final = "llmtrace.batch.size_mean"  # float sequences; forward.batching
BATCH_SIZE_MAX: Final = "llmtrace.batch.size_max"  # int sequences; forward.batching
BATCH_INVARIANT_MODE: Final = "llmtrace.batch.invariant_mode"  # bool; forward.batching
BATCH_QUEUE_MS: Final = "llmtrace.batch.queue_ms"  # float ms; forward.batching
BATCH_WAIT_MS: Final = "llmtrace.batch.wait_ms"  # float ms; forward.batching

# ── stage 26 gen.lm_head (catalog/generation.py)
LM_HEAD_VOCAB: Final = "llmtrace.lm_head.vocab"  # int tokens; gen.lm_head
LM_HEAD_PARAMS: Final = "llmtrace.lm_head.params"  # int; gen.lm_head
LM_HEAD_SHARE_OF_PARAMS: Final = "llmtrace.lm_head.share_of_params"  # float 0..1; gen.lm_head
LM_HEAD_MS: Final = "llmtrace.lm_head.ms"  # float ms; gen.lm_head

# ── stage 27 gen.penalties (catalog/generation.py)
PENALTIES_REPETITION: Final = "llmtrace.penalties.repetition"  # float; gen.penalties
PENALTIES_ON_STRUCTURED_OUTPUT: Final = "llmtrace.penalties.on_structured_output"  # bool; gen.penalties

# ── stage 28 gen.sampling (catalog/generation.py)
SAMPLING_MIN_P: Final = "llmtrace.sampling.min_p"  # float; gen.sampling
SAMPLING_GREEDY: Final = "llmtrace.sampling.greedy"  # bool; gen.sampling
SAMPLING_EFFECTIVE_TEMPERATURE: Final = "llmtrace.sampling.effective_temperature"  # float; gen.sampling
SAMPLING_EFFECTIVE_TOP_P: Final = "llmtrace.sampling.effective_top_p"  # float; gen.sampling
SAMPLING_EFFECTIVE_TOP_K: Final = "llmtrace.sampling.effective_top_k"  # int; gen.sampling
SAMPLING_EFFECTIVE_SEED: Final = "llmtrace.sampling.effective_seed"  # int; gen.sampling
SAMPLING_CLAMPED: Final = "llmtrace.sampling.clamped"  # str[]; gen.sampling
REQUESTED_ONLY: Final = "llmtrace.requested_only"  # bool; gen.sampling

# ── stage 29 gen.constrained (catalog/generation.py)
CONSTRAINT_KIND: Final = "llmtrace.constraint.kind"  # str; gen.constrained
CONSTRAINT_COMPILE_MS: Final = "llmtrace.constraint.compile_ms"  # float ms; gen.constrained
CONSTRAINT_MASKED_FRACTION: Final = "llmtrace.constraint.masked_fraction"  # float 0..1; gen.constrained
CONSTRAINT_FORCED_TOKENS: Final = "llmtrace.constraint.forced_tokens"  # int tokens; gen.constrained
CONSTRAINT_DEAD_END: Final = "llmtrace.constraint.dead_end"  # bool; gen.constrained

# ── stage 30 gen.reasoning_budget (catalog/generation.py)
REASONING_BUDGET: Final = "llmtrace.reasoning.budget"  # int tokens; gen.reasoning_budget
REASONING_FORCED_CLOSE: Final = "llmtrace.reasoning.forced_close"  # bool; gen.reasoning_budget

# ── stage 31 gen.speculation (catalog/generation.py)
SPEC_METHOD: Final = "llmtrace.spec.method"  # str; gen.speculation
SPEC_K: Final = "llmtrace.spec.k"  # int tokens; gen.speculation
SPEC_DRAFTED: Final = "llmtrace.spec.drafted"  # int tokens; gen.speculation
SPEC_ACCEPTED: Final = "llmtrace.spec.accepted"  # int tokens; gen.speculation
SPEC_ACCEPTANCE_RATE: Final = "llmtrace.spec.acceptance_rate"  # float 0..1; gen.speculation
SPEC_BATCH_SIZE: Final = "llmtrace.spec.batch_size"  # float sequences; gen.speculation

# ── stage 32 gen.stop (catalog/generation.py)
STOP_MATCHED: Final = "llmtrace.stop.matched"  # str; gen.stop
STOP_TRUNCATED: Final = "llmtrace.stop.truncated"  # bool; gen.stop
STOP_OUTPUT_PARSES: Final = "llmtrace.stop.output_parses"  # bool; gen.stop
STOP_KIND: Final = "llmtrace.stop.kind"  # str; gen.stop
STOP_AT_CHAR: Final = "llmtrace.stop.at_char"  # int chars; gen.stop
STOP_STRINGS: Final = "llmtrace.stop.strings"  # int; gen.stop
STOP_PRECEDED_BY: Final = "llmtrace.stop.preceded_by"  # str; gen.stop
STOP_INSIDE: Final = "llmtrace.stop.inside"  # str; gen.stop
STOP_STRING_CLASS: Final = "llmtrace.stop.string_class"  # str; gen.stop
STOP_STRING_CHARS: Final = "llmtrace.stop.string_chars"  # int chars; gen.stop
STOP_STRING_HASH: Final = "llmtrace.stop.string_hash"  # str; gen.stop

# ── stage 33 gen.detokenization (catalog/generation.py)
DETOK_HELD_BACK_MAX: Final = "llmtrace.detok.held_back_max"  # int bytes; gen.detokenization
DETOK_REPLACEMENT_CHARS: Final = "llmtrace.detok.replacement_chars"  # int chars; gen.detokenization
DETOK_HOLD_BACK: Final = "llmtrace.detok.hold_back"  # bool; gen.detokenization
DETOK_SKIP_SPECIAL_TOKENS: Final = "llmtrace.detok.skip_special_tokens"  # bool; gen.detokenization
DETOK_STOP_HOLDBACK_CHARS: Final = "llmtrace.detok.stop_holdback_chars"  # int chars; gen.detokenization
DETOK_STOP_LEAKED_CHARS: Final = "llmtrace.detok.stop_leaked_chars"  # int chars; gen.detokenization
DETOK_FIRST_TEXT_DELAY_MS: Final = "llmtrace.detok.first_text_delay_ms"  # float ms; gen.detokenization

# ── stage 34 gen.streaming (catalog/generation.py)
STREAM_CHUNKS: Final = "llmtrace.stream.chunks"  # int chunks; gen.streaming
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"  # float s; gen.streaming
STREAM_ITL_P50_MS: Final = "llmtrace.stream.itl_p50_ms"  # float ms; gen.streaming
STREAM_ITL_P99_MS: Final = "llmtrace.stream.itl_p99_ms"  # float ms; gen.streaming
STREAM_FIRST_CONTENT_MS: Final = "llmtrace.stream.first_content_ms"  # float ms; gen.streaming
STREAM_FIRST_TOOL_CALL_MS: Final = "llmtrace.stream.first_tool_call_ms"  # float ms; gen.streaming
STREAM_CONTENT_CHUNKS: Final = "llmtrace.stream.content_chunks"  # int chunks; gen.streaming
STREAM_PARSE_STOPPED: Final = "llmtrace.stream.parse_stopped"  # bool; gen.streaming

# ── stage 35 loop.tool_dispatch (catalog/loops.py)
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"  # str; loop.tool_dispatch
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"  # str; loop.tool_dispatch
TOOL_SCOPE: Final = "llmtrace.tool.scope"  # str; loop.tool_dispatch
TOOL_ERROR: Final = "llmtrace.tool.error"  # str; loop.tool_dispatch
TOOL_RESULT_TOKENS: Final = "llmtrace.tool.result_tokens"  # int tokens; loop.tool_dispatch
TOOL_OBSERVED: Final = "llmtrace.tool.observed"  # str; loop.tool_dispatch
TOOL_ARGUMENTS_HASH: Final = "llmtrace.tool.arguments_hash"  # str; loop.tool_dispatch
TOOL_RESULT_HASH: Final = "llmtrace.tool.result_hash"  # str; loop.tool_dispatch
TOOL_RESULT_KIND: Final = "llmtrace.tool.result_kind"  # str; loop.tool_dispatch

# ── stage 36 loop.fan_out (catalog/loops.py)
FANOUT_CALLS: Final = "llmtrace.fanout.calls"  # int calls; loop.fan_out
FANOUT_MODE: Final = "llmtrace.fanout.mode"  # str; loop.fan_out
FANOUT_PASSES: Final = "llmtrace.fanout.passes"  # int passes; loop.fan_out
FANOUT_REPREFILL_TOKENS: Final = "llmtrace.fanout.reprefill_tokens"  # int tokens; loop.fan_out
FANOUT_ERRORS: Final = "llmtrace.fanout.errors"  # int calls; loop.fan_out

# ── stage 37 loop.budget (catalog/loops.py)
BUDGET_STEPS: Final = "llmtrace.budget.steps"  # int steps; loop.budget
BUDGET_MAX_STEPS: Final = "llmtrace.budget.max_steps"  # int steps; loop.budget
BUDGET_TOKENS: Final = "llmtrace.budget.tokens"  # int tokens; loop.budget
BUDGET_SPEND_USD: Final = "llmtrace.budget.spend_usd"  # float USD; loop.budget
BUDGET_WALL_MS: Final = "llmtrace.budget.wall_ms"  # float ms; loop.budget
BUDGET_LOOP_DETECTED: Final = "llmtrace.budget.loop_detected"  # bool; loop.budget
BUDGET_STOPPED_BY: Final = "llmtrace.budget.stopped_by"  # str; loop.budget
LOOP_REPEATED_TOOL_CALLS: Final = "llmtrace.loop.repeated_tool_calls"  # int calls; loop.budget
LOOP_REPEATED_TOOL_RESULTS: Final = "llmtrace.loop.repeated_tool_results"  # int calls; loop.budget
LOOP_OBSERVED: Final = "llmtrace.loop.observed"  # str; loop.budget
BUDGET_MAX_TOKENS: Final = "llmtrace.budget.max_tokens"  # int tokens; loop.budget
BUDGET_MAX_SPEND_USD: Final = "llmtrace.budget.max_spend_usd"  # float USD; loop.budget
BUDGET_MAX_WALL_MS: Final = "llmtrace.budget.max_wall_ms"  # float ms; loop.budget

# ── stage 38 loop.compaction (catalog/loops.py)
COMPACTION_TRIGGER_TOKENS: Final = "llmtrace.compaction.trigger_tokens"  # int tokens; loop.compaction
COMPACTION_TOKENS_BEFORE: Final = "llmtrace.compaction.tokens_before"  # int tokens; loop.compaction
COMPACTION_TOKENS_AFTER: Final = "llmtrace.compaction.tokens_after"  # int tokens; loop.compaction
COMPACTION_TURNS_SUMMARIZED: Final = "llmtrace.compaction.turns_summarized"  # int turns; loop.compaction
COMPACTION_PINNED: Final = "llmtrace.compaction.pinned"  # int items; loop.compaction
COMPACTION_FACTS_LOST: Final = "llmtrace.compaction.facts_lost"  # str[]; loop.compaction
COMPACTION_HISTORY_REWRITTEN: Final = "llmtrace.compaction.history_rewritten"  # bool; loop.compaction
COMPACTION_KEPT_MESSAGES: Final = "llmtrace.compaction.kept_messages"  # int messages; loop.compaction
COMPACTION_OBSERVED: Final = "llmtrace.compaction.observed"  # str; loop.compaction
COMPACTION_COMPACTED: Final = "llmtrace.compaction.compacted"  # bool; loop.compaction
COMPACTION_FACTS_LOST_COUNT: Final = "llmtrace.compaction.facts_lost_count"  # int facts; loop.compaction
COMPACTION_METHOD: Final = "llmtrace.compaction.method"  # str; loop.compaction

# ── stage 39 safety.injection (catalog/safety.py)
INJECTION_SPANS_SCANNED: Final = "llmtrace.injection.spans_scanned"  # int spans; safety.injection
INJECTION_INVISIBLE_CHARS: Final = "llmtrace.injection.invisible_chars"  # int chars; safety.injection
INJECTION_CONFUSABLES: Final = "llmtrace.injection.confusables"  # int chars; safety.injection
INJECTION_INSTRUCTION_PATTERNS: Final = "llmtrace.injection.instruction_patterns"  # int; safety.injection
INJECTION_SCORE: Final = "llmtrace.injection.score"  # float 0..1; safety.injection
INJECTION_ACTION: Final = "llmtrace.injection.action"  # str; safety.injection

# ── stage 40 safety.moderation (catalog/safety.py)
MODERATION_CHECKS: Final = "llmtrace.moderation.checks"  # int; safety.moderation
MODERATION_LAG_TOKENS: Final = "llmtrace.moderation.lag_tokens"  # int tokens; safety.moderation
MODERATION_ABORTED: Final = "llmtrace.moderation.aborted"  # bool; safety.moderation
MODERATION_RETRACTED_CHARS: Final = "llmtrace.moderation.retracted_chars"  # int chars; safety.moderation
MODERATION_SHOWN_CHARS: Final = "llmtrace.moderation.shown_chars"  # int chars; safety.moderation

# ── stage 41 safety.stop_reason (catalog/safety.py)
STOP_REASON_READ: Final = "llmtrace.stop_reason.read"  # bool; safety.stop_reason
STOP_REASON_TRUNCATED: Final = "llmtrace.stop_reason.truncated"  # bool; safety.stop_reason
STOP_REASON_PARSE_OK: Final = "llmtrace.stop_reason.parse_ok"  # bool; safety.stop_reason
STOP_REASON_FINISH_REASON: Final = "llmtrace.stop_reason.finish_reason"  # str; safety.stop_reason
STOP_REASON_ERROR: Final = "llmtrace.stop_reason.error"  # str; safety.stop_reason

# ── stage 42 meters.cache_accounting (catalog/meters.py)
METERS_CACHE_HIT_RATE: Final = "llmtrace.meters.cache_hit_rate"  # float 0..1; meters.cache_accounting
METERS_CACHED_TOKENS: Final = "llmtrace.meters.cached_tokens"  # int tokens; meters.cache_accounting
METERS_UNCACHED_TOKENS: Final = "llmtrace.meters.uncached_tokens"  # int tokens; meters.cache_accounting
SERVICE_VERSION: Final = "service.version"  # str; meters.cache_accounting
METERS_PRICE_SOURCE: Final = "llmtrace.meters.price_source"  # str; meters.cache_accounting
METERS_PRICE_VERSION: Final = "llmtrace.meters.price_version"  # str; meters.cache_accounting
METERS_PRICE_MODEL: Final = "llmtrace.meters.price_model"  # str; meters.cache_accounting
METERS_CACHE_READ_COST_USD: Final = "llmtrace.meters.cache_read_cost_usd"  # float USD; meters.cache_accounting
METERS_CACHE_WRITE_5M_COST_USD: Final = "llmtrace.meters.cache_write_5m_cost_usd"  # float USD; meters.cache_accounting
METERS_CACHE_WRITE_1H_COST_USD: Final = "llmtrace.meters.cache_write_1h_cost_usd"  # float USD; meters.cache_accounting
