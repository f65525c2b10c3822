"""Per-section timing of one forward pass that never forces a device synchronization.

On CPU every op has finished when it returns, so a host clock is exact. On CUDA the clock records events
in the stream and reads them only in ``totals()``, which the engine calls after it has copied the sampled
tokens to the host (a synchronization that happens anyway).
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch


class ForwardClock:
    __slots__ = ("_cuda", "_totals", "_pending")

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._cuda = torch.device(device).type == "cuda"
        self._totals: dict[str, float] = defaultdict(float)
        self._pending: list[tuple[str, object, object]] = []

    def mark(self) -> object:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter_ns()

    def add(self, section: str, start: object) -> None:
        """Charge the time since ``start`` (a ``mark()``) to ``section``."""
        end = self.mark()
        if self._cuda:
            self._pending.append((section, start, end))
        else:
            self._totals[section] += (end - start) / 1e6  # type: ignore[operator]

    def totals(self) -> dict[str, float]:
        """Milliseconds per section."""
        for section, start, end in self._pending:
            self._totals[section] += start.elapsed_time(end)  # type: ignore[attr-defined]
        self._pending.clear()
        return dict(self._totals)
