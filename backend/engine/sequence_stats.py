"""What one pass went through inside the engine, summed over its steps (per-token work aggregated)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from llmtrace.backend.engine.self_time import SelfTime


@dataclass(slots=True)
class SequenceStats:
    # cache & reuse
    prefix_hit_tokens: int = 0
    prefix_key: str = ""
    prefix_first_miss: int = 0
    prefix_lookup_ns: tuple[int, int] = (0, 0)
    kv_tokens_written: int = 0
    blocks_allocated: int = 0
    preemptions: int = 0
    peak_utilization: float = 0.0
    blocks_evicted: int = 0
    pressure_at_admission: float = 0.0
    offload_out: int = 0
    offload_in: int = 0
    offload_bytes: int = 0
    offload_ms: float = 0.0
    # forward pass
    embedded_tokens: int = 0
    max_position: int = 0
    kv_len_max: int = 0
    prefill_tokens: int = 0
    prefill_chunks: int = 0
    prefill_ms: float = 0.0
    prefill_cpu_ns: int = 0  # the engine thread's CPU time in the prefill steps
    prefill_cpu_wait_ns: int | None = None  # ... and its run-queue wait there (None: not known here)
    decode_steps: int = 0
    decode_ms: float = 0.0
    kv_bytes_read: int = 0
    batch_steps: int = 0
    batch_size_sum: int = 0
    batch_size_max: int = 0
    section_ms: dict[str, float] = field(default_factory=dict)  # embedding, positional, attention, ...
    # speculation
    spec_steps: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_batch_sum: int = 0
    spec_ms: float = 0.0
    # time windows of each stage: stage id -> [first start ns, last end ns]
    windows: dict[str, list[int]] = field(default_factory=dict)
    first_token_ns: int = 0
    first_text_ns: int = 0  # first step whose output carried text (after any detokenizer hold-back)
    last_token_ns: int = 0
    self_time: SelfTime = field(default_factory=SelfTime)  # exclusive time per stage (self_time.py)
    _composition: hashlib.blake2b = field(default_factory=lambda: hashlib.blake2b(digest_size=8))

    def window(self, stage_id: str, start_ns: int, end_ns: int) -> None:
        w = self.windows.get(stage_id)
        if w is None:
            self.windows[stage_id] = [start_ns, end_ns]
        else:
            w[0] = min(w[0], start_ns)
            w[1] = max(w[1], end_ns)

    def add_sections(self, sections: dict[str, float]) -> None:
        for name, ms in sections.items():
            self.section_ms[name] = self.section_ms.get(name, 0.0) + ms

    def add_batch(self, size: int, composition: str) -> None:
        self.batch_steps += 1
        self.batch_size_sum += size
        self.batch_size_max = max(self.batch_size_max, size)
        self._composition.update(composition.encode())

    def composition_hash(self) -> str:
        return self._composition.copy().hexdigest()
