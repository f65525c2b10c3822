"""A constant for every stage id in the registry, in pipeline order.

GENERATED from the stage registry by ``python -m llmtrace.tracer.registry.names_gen``: do not edit by hand;
change the catalog (tracer/registry/catalog/*.py, pass_values.py, stages.py) and run it again.
"""

from __future__ import annotations

from typing import Final

ARRIVAL_CONNECTION: Final = "arrival.connection"  # 1. Connection
ARRIVAL_ADMISSION: Final = "arrival.admission"  # 2. Admission control
ARRIVAL_MODEL_ROUTING: Final = "arrival.model_routing"  # 3. Model routing
ARRIVAL_REPLICA_SELECTION: Final = "arrival.replica_selection"  # 4. Replica selection
ARRIVAL_STREAM_SETUP: Final = "arrival.stream_setup"  # 5. Stream setup
INTAKE_NORMALIZATION: Final = "intake.normalization"  # 6. Unicode normalization
INTAKE_SYSTEM_PROMPT: Final = "intake.system_prompt"  # 7. System prompt assembly
INTAKE_CONTEXT_ORDERING: Final = "intake.context_ordering"  # 8. Context ordering
INTAKE_EVIDENCE_FORMATTING: Final = "intake.evidence_formatting"  # 9. Evidence formatting
INTAKE_CHAT_TEMPLATE: Final = "intake.chat_template"  # 10. Chat templating
INTAKE_TOKENIZATION: Final = "intake.tokenization"  # 11. Tokenization
CACHE_PREFIX_MATCH: Final = "cache.prefix_match"  # 12. Prefix match
CACHE_KV_WRITE: Final = "cache.kv_write"  # 13. KV write
CACHE_BLOCK_ALLOCATION: Final = "cache.block_allocation"  # 14. Block allocation
CACHE_EVICTION: Final = "cache.eviction"  # 15. Eviction
CACHE_HOST_OFFLOAD: Final = "cache.host_offload"  # 16. Host offload
FORWARD_EMBEDDING: Final = "forward.embedding"  # 17. Embedding
FORWARD_POSITIONAL: Final = "forward.positional"  # 18. Rotary positions
FORWARD_ATTENTION: Final = "forward.attention"  # 19. Attention kernel
FORWARD_ATTENTION_VARIANT: Final = "forward.attention_variant"  # 20. Attention variant
FORWARD_MOE_ROUTING: Final = "forward.moe_routing"  # 21. Expert routing
FORWARD_FEED_FORWARD: Final = "forward.feed_forward"  # 22. Feed-forward
FORWARD_PREFILL: Final = "forward.prefill"  # 23. Prefill
FORWARD_DECODE: Final = "forward.decode"  # 24. Decode
FORWARD_BATCHING: Final = "forward.batching"  # 25. Continuous batching
GEN_LM_HEAD: Final = "gen.lm_head"  # 26. LM head
GEN_PENALTIES: Final = "gen.penalties"  # 27. Penalties
GEN_SAMPLING: Final = "gen.sampling"  # 28. Sampling
GEN_CONSTRAINED: Final = "gen.constrained"  # 29. Constrained decoding
GEN_REASONING_BUDGET: Final = "gen.reasoning_budget"  # 30. Reasoning budget
GEN_SPECULATION: Final = "gen.speculation"  # 31. Speculation
GEN_STOP: Final = "gen.stop"  # 32. Stop criteria
GEN_DETOKENIZATION: Final = "gen.detokenization"  # 33. Detokenization
GEN_STREAMING: Final = "gen.streaming"  # 34. Streaming
LOOP_TOOL_DISPATCH: Final = "loop.tool_dispatch"  # 35. Tool dispatch
LOOP_FAN_OUT: Final = "loop.fan_out"  # 36. Fan-out
LOOP_BUDGET: Final = "loop.budget"  # 37. Budgets
LOOP_COMPACTION: Final = "loop.compaction"  # 38. Compaction
SAFETY_INJECTION: Final = "safety.injection"  # 39. Injection scan
SAFETY_MODERATION: Final = "safety.moderation"  # 40. Streaming moderation
SAFETY_STOP_REASON: Final = "safety.stop_reason"  # 41. Stop-reason handling
METERS_CACHE_ACCOUNTING: Final = "meters.cache_accounting"  # 42. Cache accounting
