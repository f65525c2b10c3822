"""Speculative decoding: cheap drafts, verified by the full model in one forward pass.

- ``NgramDrafter`` (prompt lookup): find the latest earlier occurrence of the sequence's last n tokens
  (longest n first) and propose the tokens that followed it. Free to compute; shines on text that repeats.
- ``SelfDrafter``: run the first N layers plus the LM head as a small draft model, greedily.

Acceptance: the engine computes the target token at every drafted position (``GenerationPipeline.
sample_draft_targets``) and keeps the longest prefix where draft and target agree, plus the target token at
the first disagreement. Drafts are deterministic (a one-hot draft distribution), so for sampled decoding
"draw from the target, accept if equal" is the exact speculative-sampling rule: a draft token is accepted
with probability p(d) and a rejection leaves a sample from p restricted to the other tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def accept_drafts(draft: list[int], target_tokens: list[int]) -> int:
    """How many drafted tokens the targets confirm (the length of the agreeing prefix)."""
    n = 0
    for d, t in zip(draft, target_tokens, strict=False):
        if d != t:
            break
        n += 1
    return n


class NgramDrafter:
    __slots__ = ("ngram_max", "ngram_min")

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        if ngram_min < 1 or ngram_max < ngram_min:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min

    def propose(self, token_ids: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier match of the trailing n-gram."""
        if k < 1:
            return []
        n_tokens = len(token_ids)
        for n in range(min(self.ngram_max, n_tokens - 1), self.ngram_min - 1, -1):
            tail = token_ids[n_tokens - n:]
            # latest earlier occurrence (its continuation must exist)
            for start in range(n_tokens - n - 1, -1, -1):
                if token_ids[start:start + n] == tail:
                    follow = token_ids[start + n:start + n + k]
                    if follow:
                        return list(follow)
        return []


class SelfDrafter:
    """Drafts with a truncated copy of the model. ``forward_fn(token_ids) -> logits [V]`` runs the first N
    layers + final norm + LM head over the sequence (the engine gives it a cache-friendly closure)."""

    __slots__ = ("_forward",)

    def __init__(self, model_forward_first_layers_fn: Callable[[list[int]], torch.Tensor]) -> None:
        self._forward = model_forward_first_layers_fn

    def propose(self, token_ids: list[int], k: int) -> list[int]:
        draft: list[int] = []
        seq = list(token_ids)
        for _ in range(max(k, 0)):
            logits = self._forward(seq)
            tok = int(torch.argmax(logits.reshape(-1, logits.shape[-1])[-1]))
            draft.append(tok)
            seq.append(tok)
        return draft
