"""Repetition, frequency and presence penalties, applied to raw logits before temperature.

- repetition (CTRL / Hugging Face definition): every token seen in the prompt or the output so far has its
  logit divided by ``r`` when positive and multiplied by ``r`` when negative;
- frequency and presence (OpenAI definition), over the output only:
  ``logit[t] -= frequency * count[t] + presence * (count[t] > 0)``.
"""

from __future__ import annotations

import numpy as np


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
        self._prompt_ids = np.unique(np.asarray(prompt_token_ids, dtype=np.int64)) if repetition != 1.0 else None
        self._output_ids: list[int] = []

    @property
    def active(self) -> bool:
        return self.repetition != 1.0 or self.frequency != 0.0 or self.presence != 0.0

    def append(self, token_id: int) -> None:
        self._output_ids.append(token_id)

    def apply(self, logits: np.ndarray, extra_output: list[int] | None = None) -> np.ndarray:
        """Penalized copy of one row of logits [V]; ``extra_output``: tokens assumed already emitted
        (speculative positions not yet accepted)."""
        if not self.active:
            return logits
        out_ids = np.asarray(self._output_ids + list(extra_output or ()), dtype=np.int64)
        logits = logits.copy()
        if self.repetition != 1.0:
            parts = [a for a in (self._prompt_ids, out_ids) if a is not None and a.size]
            if parts:
                seen = np.unique(np.concatenate(parts))
                picked = logits[seen]
                logits[seen] = np.where(picked > 0, picked / self.repetition, picked * self.repetition)
        if out_ids.size and (self.frequency != 0.0 or self.presence != 0.0):
            ids, counts = np.unique(out_ids, return_counts=True)
            logits[ids] -= (self.frequency * counts + self.presence).astype(logits.dtype)
        return logits
