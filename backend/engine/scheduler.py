"""Continuous batching: which sequences run this step, and how many tokens each computes.

Order of one ``schedule()``: running sequences first (decodes cost one token, or 1 + k when verifying a
draft; unfinished prefills continue in chunks), then waiting ones are admitted while the token budget,
the sequence cap and the pool allow. No sequence prefills more than ``max_prefill_chunk`` tokens per
step, so one long prompt cannot hold the step hostage while short requests wait. When the pool runs dry
the lowest-priority, most recently arrived running sequence is preempted: its blocks are released (full
ones stay in the prefix cache) and it is recomputed when readmitted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from llmtrace.backend.engine.block_manager import BlockManager
from llmtrace.backend.engine.config import EngineConfig
from llmtrace.backend.engine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledSequence:
    seq: Sequence
    num_tokens: int  # tokens computed this step, drafted ones included
    is_prefill: bool


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)


def _order(seq: Sequence) -> tuple[int, int, int]:
    return (-seq.priority, seq.arrival_ns, seq.seq_id)


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: list[Sequence] = []  # sorted: priority, then arrival
        self.running: list[Sequence] = []  # same order; preemption takes from the end

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        bisect.insort(self.waiting, seq, key=_order)

    def remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        import time

        out = SchedulerOutput(start_ns=time.time_ns())
        budget = self.config.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if seq.in_prefill:
                n = min(seq.num_uncomputed, self.config.max_prefill_chunk, budget)
            else:
                if 1 + len(seq.draft) > budget:
                    seq.draft = []
                n = 1 + len(seq.draft)
            while not self.blocks.can_append(seq, n):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is seq:
                    break
            else:
                self.blocks.append_slots(seq, n)
                out.scheduled.append(ScheduledSequence(seq, n, seq.in_prefill))
                budget -= n
                i += 1
        for seq in self.running[i:]:
            seq.draft = []  # not scheduled this step: its draft would be stale next step
        if not out.preempted:
            self._admit(out, budget)
        out.end_ns = time.time_ns()
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            if not seq.block_table:
                seq.num_computed_tokens = self.blocks.match_prefix(seq)
                if seq.stats.pressure_at_admission == 0.0:
                    seq.stats.pressure_at_admission = self.blocks.pool.fill_level()
            n = min(seq.num_uncomputed, self.config.max_prefill_chunk, budget)
            if not self.blocks.can_admit(self.blocks.blocks_needed(seq, n)):
                self.blocks.free(seq)  # give the matched blocks back; try again next step
                seq.num_computed_tokens = 0
                break
            self.blocks.append_slots(seq, n)
            self.waiting.pop(0)
            seq.status = SequenceStatus.RUNNING
            bisect.insort(self.running, seq, key=_order)
            out.admitted.append(seq)
            out.scheduled.append(ScheduledSequence(seq, n, True))
            budget -= n

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.num_computed_tokens = 0
        seq.draft = []
        seq.stats.preemptions += 1
        out.preempted.append(seq)
        self.add(seq)
