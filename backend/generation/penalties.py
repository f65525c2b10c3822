"""Repetition, frequency and presence penalties, applied to raw logits before temperature.

- repetition (CTRL / Hugging Face definition): every token seen in the prompt or the output so far has its
  logit divided by ``r`` when positive and multiplied by ``r`` when negative;
- frequency and presence (OpenAI definition), over the output only:
  ``logit[t] -= frequency * count[t] + presence * (count[t] > 0)``.
"""

from __future__ import annotations

import torch


class PenaltyState:
    """Per-sequence token bookkeeping the penalties need (prompt set, output counts)."""

    __slots__ = ("repetition", "frequency", "presence", "_prompt_ids", "_output_ids", "vocab_size")

    def __init__(
        self,
        prompt_token_ids: list[int],
        vocab_size: int,
        *,
        repetition: float = 1.0,
        frequency: float = 0.0,
        presence: float = 0.0,
    ) -> None:
        self.repetition = repetition
        self.frequency = frequency
        self.presence = presence
        self.vocab_size = vocab_size
        self._prompt_ids = (
            torch.tensor(sorted(set(prompt_token_ids)), dtype=torch.long) if repetition != 1.0 else None
        )
        self._output_ids: list[int] = []

    @property
    def active(self) -> bool:
        return self.repetition != 1.0 or self.frequency != 0.0 or self.presence != 0.0

    def append(self, token_id: int) -> None:
        self._output_ids.append(token_id)

    def apply(self, logits: torch.Tensor, extra_output: list[int] | None = None) -> torch.Tensor:
        """Penalized copy of one row of logits [V]; ``extra_output``: tokens assumed already emitted
        (speculative positions not yet accepted)."""
        if not self.active:
            return logits
        out_ids = self._output_ids + list(extra_output or ())
        logits = logits.clone()
        if self.repetition != 1.0:
            seen = torch.zeros(logits.shape[-1], dtype=torch.bool)
            if self._prompt_ids is not None and self._prompt_ids.numel():
                seen[self._prompt_ids] = True
            if out_ids:
                seen[torch.tensor(out_ids, dtype=torch.long)] = True
            picked = logits[seen]
            logits[seen] = torch.where(picked > 0, picked / self.repetition, picked * self.repetition)
        if out_ids and (self.frequency != 0.0 or self.presence != 0.0):
            counts = torch.bincount(torch.tensor(out_ids, dtype=torch.long), minlength=logits.shape[-1])
            counts = counts[: logits.shape[-1]].to(logits.dtype)
            logits -= self.frequency * counts + self.presence * (counts > 0).to(logits.dtype)
        return logits
