"""Speculative decoding inside the engine: propose drafts before scheduling, verify them in the step.

- ``ngram``: prompt lookup (``NgramDrafter``), proposed before scheduling so the draft's length is known.
- ``self_draft``: the first N layers + LM head of the model itself, greedily, one token at a time, over
  the same paged cache. The shallow layers' keys/values for a drafted position are exactly what the full
  model writes there, and the verification pass overwrites them anyway, so drafting needs no cache of
  its own and nothing to roll back.

The verification itself is the normal step: the sequence computes its last token plus the k drafts in
one forward pass, gets k + 1 rows of logits, and the generation pipeline keeps the agreeing prefix.
"""

from __future__ import annotations

import torch

from llmtrace.backend.engine.model_runner import ModelRunner, StepInputs
from llmtrace.backend.engine.scheduler import ScheduledSequence
from llmtrace.backend.engine.sequence import Sequence
from llmtrace.backend.generation.speculation import NgramDrafter
from llmtrace.backend.kernels.interface import AttentionMetadata


class Drafting:
    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self._ngram: dict[tuple[int, int], NgramDrafter] = {}
        self.pending_self_draft: set[int] = set()

    def propose(self, running: list[Sequence], max_model_len: int) -> None:
        """Set ``seq.draft`` for decoding sequences that asked for speculation."""
        self.pending_self_draft.clear()
        for seq in running:
            seq.draft = []
            spec = seq.request.params.speculation
            if spec.method == "none" or seq.in_prefill:
                continue
            room = min(seq.request.params.max_tokens - seq.num_output_tokens, max_model_len - seq.num_tokens) - 1
            k = min(spec.k, room)
            if k < 1:
                continue
            if spec.method == "ngram":
                key = (spec.ngram_max, 1)
                drafter = self._ngram.get(key) or self._ngram.setdefault(key, NgramDrafter(spec.ngram_max))
                seq.draft = drafter.propose(seq.token_ids, k)[:k]
            elif spec.method == "self_draft":
                seq.draft = [0] * k  # placeholders: filled once the step's slots are allocated
                self.pending_self_draft.add(seq.seq_id)

    @torch.inference_mode()
    def fill_self_drafts(self, scheduled: list[ScheduledSequence], inputs: StepInputs) -> None:
        """Run the shallow model k times over the self-drafting sequences and patch the step's input ids."""
        if not self.pending_self_draft:
            return
        flat = 0
        groups: dict[int, list[tuple[Sequence, int]]] = {}
        for item in scheduled:
            seq = item.seq
            if seq.seq_id in self.pending_self_draft and seq.draft and not item.is_prefill:
                layers = seq.request.params.speculation.draft_layers
                groups.setdefault(layers, []).append((seq, flat + item.num_tokens - len(seq.draft)))
            flat += item.num_tokens
        for layers, members in groups.items():
            num_layers = max(1, min(layers, self.runner.model.config.num_layers))
            k = max(len(seq.draft) for seq, _ in members)
            for j in range(k):
                active = [(seq, at) for seq, at in members if j < len(seq.draft)]
                step = self._single_token_inputs([(seq, seq.num_computed_tokens + j) for seq, _ in active])
                logits, _ = self.runner.run(step, num_layers=num_layers)
                picks = logits.argmax(dim=-1).tolist()
                for (seq, at), tok in zip(active, picks, strict=True):
                    seq.draft[j] = int(tok)
                    inputs.input_ids[at + j] = int(tok)
        self.pending_self_draft.clear()

    def _single_token_inputs(self, items: list[tuple[Sequence, int]]) -> StepInputs:
        """One token per sequence at ``position`` (the last sampled token or an earlier draft)."""
        bs = self.runner.kv.block_size
        dev = self.runner.device
        ids, positions, slots, tables = [], [], [], []
        for seq, pos in items:
            pending = seq.token_ids + seq.draft
            table = [b.block_id for b in seq.block_table]
            ids.append(pending[pos])
            positions.append(pos)
            slots.append(table[pos // bs] * bs + pos % bs)
            tables.append(table)
        width = max(len(t) for t in tables)
        n = len(items)
        seq_lens = [p + 1 for p in positions]
        meta = AttentionMetadata(
            query_start_loc=torch.arange(n + 1, dtype=torch.int32, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32, device=dev),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            max_query_len=1,
            max_seq_len=max(seq_lens),
            seq_lens_list=tuple(seq_lens),
            query_lens_list=(1,) * n,
        )
        return StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long, device=dev),
            positions=torch.tensor(positions, dtype=torch.long, device=dev),
            meta=meta,
            logits_indices=torch.arange(n, dtype=torch.long, device=dev),
            logits_rows=tuple((i, 1) for i in range(n)),
            num_tokens=n,
        )
