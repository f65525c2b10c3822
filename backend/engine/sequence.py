"""One request inside the engine: its tokens, its KV blocks, where its computation stands."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from llmtrace.backend.engine.block_pool import Block
from llmtrace.backend.engine.request import EngineRequest
from llmtrace.backend.engine.sequence_stats import SequenceStats


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    request: EngineRequest
    gen: Any  # the generation pipeline's per-sequence state
    seq_id: int
    arrival_ns: int
    token_ids: list[int] = field(default_factory=list)  # prompt + accepted output
    num_prompt_tokens: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose keys/values are in the cache
    block_table: list[Block] = field(default_factory=list)
    block_keys: list[int] = field(default_factory=list)  # prefix-cache keys of the full blocks known so far
    num_registered_blocks: int = 0  # leading blocks already offered to the prefix cache
    num_cached_tokens: int = 0  # prompt tokens served from the cache at first admission
    draft: list[int] = field(default_factory=list)  # speculative tokens proposed for this step
    finish_reason: str | None = None
    stats: SequenceStats = field(default_factory=SequenceStats)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def priority(self) -> int:
        return self.request.priority

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def in_prefill(self) -> bool:
        """More than the last sampled token still needs computing (a prompt, or a recompute after preemption)."""
        return self.num_uncomputed > 1 or self.num_output_tokens == 0

    @property
    def finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED
