"""What this process holds between calls, in one object: ``runtime``.

Each layer that keeps process-wide state attaches it here as one part, under a name, and keeps a typed
handle to it: the tracing set-up ``llmtrace.init`` made (``lifecycle.Tracing``: provider, settings,
processors), the capture mode and hash key (``capture.CaptureState``), what reading remembers across
prompts (``reading/memory.py``, ``Memory``) and the price tables with their caches
(``tracer/record/prices.py``, ``PriceState``). A part is a dataclass with ``clear()``.

``runtime.clear()`` returns the process to how it started: every part cleared, the last attached first (a
module attaches its part when it is imported, after the modules it imports: the parts above the set-up let
go before ``lifecycle`` shuts it down). The parts
are then as they were at import: no tracing, the default capture mode, a fresh per-process hash key on the
next hash (the store's key again after the next ``llmtrace.init``), nothing remembered, the price tables
read again on the next priced pass. The health counters (``health.py``) stay: they count for the whole
process, and readers take differences of them.

This module imports nothing of llmtrace: the parts' modules import it, from any layer above ``record``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, TypeVar


class Part(Protocol):
    def clear(self) -> None: ...


P = TypeVar("P", bound=Part)


@dataclass(slots=True)
class Runtime:
    parts: dict[str, Part] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, name: str, part: P) -> P:
        """Hold ``part`` under ``name``; the part already held under that name when there is one (a module
        imported twice, as under an old path, shares its state)."""
        with self._lock:
            held = self.parts.setdefault(name, part)
        return held  # type: ignore[return-value]

    def clear(self) -> None:
        """Forget everything this process holds: each part cleared, the last attached first."""
        with self._lock:
            parts = list(self.parts.values())
        for part in reversed(parts):
            part.clear()


runtime = Runtime()
