"""Per-section timing of one forward pass that never forces a device synchronization.

On CPU every op has finished when it returns, so a host clock is exact. On CUDA the clock records events
in the stream and reads them only in ``totals()``, which the engine calls after it has copied the sampled
tokens to the host (a synchronization that happens anyway).

``ForwardClock(enabled=False)`` (``EngineConfig(stage_timing=False)``) reads no clock and records no event:
``mark`` and ``add`` return at once and ``totals`` is empty, so the pass's stages carry no section times.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

_now = time.perf_counter_ns  # the host clock of a CPU pass (a module name, so a test can see every read)


class ForwardClock:
    __slots__ = ("_cuda", "_totals", "_pending", "enabled")

    def __init__(self, device: torch.device | str = "cpu", enabled: bool = True) -> None:
        self._cuda = torch.device(device).type == "cuda"
        self._totals: dict[str, float] = defaultdict(float)
        self._pending: list[tuple[str, object, object]] = []
        self.enabled = enabled

    def mark(self) -> object:
        if not self.enabled:
            return 0
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return _now()

    def add(self, section: str, start: object) -> None:
        """Charge the time since ``start`` (a ``mark()``) to ``section``."""
        if not self.enabled:
            return
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
