"""Turns a schedule into model inputs (flat tokens, positions, cache slots, ``AttentionMetadata``) and runs
the model. Metadata is built from host-side lists, so no step ever waits on the device to learn a length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmtrace.backend.engine.kv_cache import KVCache
from llmtrace.backend.engine.scheduler import ScheduledSequence
from llmtrace.backend.kernels.interface import AttentionMetadata
from llmtrace.backend.kernels.selection import BackendChoice
from llmtrace.backend.model.forward_clock import ForwardClock
from llmtrace.backend.model.llama import LlamaModel


@dataclass(frozen=True, slots=True)
class StepInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor
    logits_rows: tuple[tuple[int, int], ...]  # per scheduled sequence: (first logits row, row count)
    num_tokens: int


class ModelRunner:
    def __init__(
        self, model: LlamaModel, kv: KVCache, attention: BackendChoice, invariant: bool, stage_timing: bool = True
    ) -> None:
        self.model = model
        self.kv = kv
        self.attention = attention
        self.invariant = invariant
        self.stage_timing = stage_timing  # False: the forward clock reads no clock (no per-section times)
        self.device = model.device

    def prepare(self, scheduled: list[ScheduledSequence]) -> StepInputs:
        bs = self.kv.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        query_lens: list[int] = []
        logits_indices: list[int] = []
        logits_rows: list[tuple[int, int]] = []
        tables: list[list[int]] = []
        for item in scheduled:
            seq, n = item.seq, item.num_tokens
            start = seq.num_computed_tokens
            tokens = (seq.token_ids + seq.draft)[start : start + n]
            if len(tokens) != n:
                raise RuntimeError(f"{seq.request_id}: scheduled {n} tokens but only {len(tokens)} are pending")
            table = [b.block_id for b in seq.block_table]
            flat = len(ids)
            ids.extend(tokens)
            positions.extend(range(start, start + n))
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            seq_lens.append(start + n)
            query_lens.append(n)
            tables.append(table)
            if start + n >= seq.num_tokens:  # the step reaches the sequence's end: logits for what comes next
                count = 1 + len(seq.draft)
                logits_rows.append((len(logits_indices), count))
                logits_indices.extend(range(flat + n - count, flat + n))
            else:
                logits_rows.append((len(logits_indices), 0))
        width = max(len(t) for t in tables)
        dev = self.device
        meta = AttentionMetadata(
            query_start_loc=torch.tensor([0, *_cumsum(query_lens)], dtype=torch.int32, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32, device=dev),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
            seq_lens_list=tuple(seq_lens),
            query_lens_list=tuple(query_lens),
        )
        return StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long, device=dev),
            positions=torch.tensor(positions, dtype=torch.long, device=dev),
            meta=meta,
            logits_indices=torch.tensor(logits_indices, dtype=torch.long, device=dev),
            logits_rows=tuple(logits_rows),
            num_tokens=len(ids),
        )

    @torch.inference_mode()
    def run(self, inputs: StepInputs, num_layers: int | None = None) -> tuple[torch.Tensor, ForwardClock]:
        """Float32 logits ``[len(logits_indices), vocab]`` (on the host) and the clock of the pass."""
        clock = ForwardClock(self.device, enabled=self.stage_timing)
        logits = self.model.forward(
            inputs.input_ids,
            inputs.positions,
            self.kv.layers,
            inputs.meta,
            self.attention.backend,
            inputs.logits_indices,
            num_layers=num_layers,
            invariant=self.invariant,
            clock=clock,
        )
        return logits.cpu(), clock


def _cumsum(values: list[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out
