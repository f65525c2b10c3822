"""Engine settings: one frozen record, checked when made."""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.backend.model.compute_path import DECODE_CHOICES, DTYPE_CHOICES

EVICTION_POLICIES = ("lru", "lfu", "leaf_first", "priority")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    block_size: int = 16  # tokens per KV block
    num_blocks: int = 1024  # KV blocks in the device pool (16k token slots at the default size)
    max_num_seqs: int = 16  # sequences running at once
    max_num_batched_tokens: int = 2048  # token budget of one step (decode tokens count one each)
    max_prefill_chunk: int = 512  # most prompt tokens one sequence may prefill in one step (fairness)
    eviction_policy: str = "lru"
    watermark: float = 0.02  # keep this share of the pool free: cached blocks are evicted below it
    host_tier_blocks: int = 0  # blocks the host-memory tier can hold (0: no host tier)
    batch_invariant: bool = False
    dtype: str = "float32"  # "auto": chosen by the host (compute_path.py); float32/bfloat16 override it
    decode: str = "auto"  # decode matmuls: "int4" on the GGUF's 4-bit codes, "dense", or "auto" (int4 unless
    # dtype is float32 by name: the reference)
    attention_backend: str | None = None  # force "torch" or "triton"; None chooses by device
    enable_prefix_cache: bool = True
    device: str = "cpu"
    max_model_len: int | None = None  # longest prompt + output; default: the model's trained context
    num_threads: int | None = None  # torch intra-op threads (process-wide); None leaves torch's default
    stage_timing: bool = True  # per-section forward times (attention, feed_forward, ...); False: no clock reads

    def __post_init__(self) -> None:
        positive = {
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_prefill_chunk": self.max_prefill_chunk,
        }
        for key, value in positive.items():
            if value < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {', '.join(EVICTION_POLICIES)}, got {self.eviction_policy!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if self.host_tier_blocks < 0:
            raise ValueError(f"host_tier_blocks must be >= 0, got {self.host_tier_blocks}")
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {self.dtype!r}")
        if self.decode not in DECODE_CHOICES:
            raise ValueError(f"decode must be one of {', '.join(DECODE_CHOICES)}, got {self.decode!r}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (every running sequence decodes)")

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_blocks)
