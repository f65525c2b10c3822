"""Drive ``LlamaModel.forward`` over a hand-built paged cache (shuffled blocks) for correctness tests."""

from __future__ import annotations

import random

import torch

from llmtrace.backend.engine.kv_cache import KVCache
from llmtrace.backend.kernels.interface import AttentionMetadata
from llmtrace.backend.kernels.torch_reference import TorchPagedAttention
from llmtrace.backend.model.llama import LlamaModel


class PagedSequence:
    def __init__(self, token_ids: list[int], table: list[int]) -> None:
        self.token_ids = token_ids
        self.table = table
        self.computed = 0


class PagedHarness:
    def __init__(self, model: LlamaModel, num_blocks: int = 64, block_size: int = 4, seed: int = 0,
                 invariant: bool = False) -> None:
        self.model = model
        self.kv = KVCache(model.config, num_blocks, block_size, model.dtype, "cpu")
        self.block_size = block_size
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)  # scattered blocks: the table, not adjacency, must matter
        self.attention = TorchPagedAttention(invariant=invariant)
        self.invariant = invariant

    def new_sequence(self, token_ids: list[int], shared_from: PagedSequence | None = None,
                     shared_blocks: int = 0) -> PagedSequence:
        need = -(-len(token_ids) // self.block_size)
        table = list(shared_from.table[:shared_blocks]) if shared_from else []
        while len(table) < need:
            table.append(self.free.pop())
        seq = PagedSequence(token_ids, table)
        seq.computed = shared_blocks * self.block_size
        return seq

    def step(self, work: list[tuple[PagedSequence, int]]) -> list[torch.Tensor]:
        """Compute ``n`` more tokens of each sequence in one forward pass; logits of every new token."""
        bs = self.block_size
        ids, pos, slots, seq_lens, qlens, tables = [], [], [], [], [], []
        for seq, n in work:
            start = seq.computed
            ids += seq.token_ids[start : start + n]
            pos += list(range(start, start + n))
            slots += [seq.table[p // bs] * bs + p % bs for p in range(start, start + n)]
            seq_lens.append(start + n)
            qlens.append(n)
            tables.append(seq.table)
        width = max(len(t) for t in tables)
        meta = AttentionMetadata(
            query_start_loc=torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], dtype=torch.int32),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
            slot_mapping=torch.tensor(slots, dtype=torch.long),
            max_query_len=max(qlens),
            max_seq_len=max(seq_lens),
            seq_lens_list=tuple(seq_lens),
            query_lens_list=tuple(qlens),
        )
        with torch.inference_mode():
            logits = self.model.forward(
                torch.tensor(ids), torch.tensor(pos), self.kv.layers, meta, self.attention,
                torch.arange(len(ids)), invariant=self.invariant,
            )
        out, at = [], 0
        for seq, n in work:
            out.append(logits[at : at + n])
            at += n
            seq.computed += n
        return out
