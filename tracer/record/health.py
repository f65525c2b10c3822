"""Counters for what the tracer dropped, and warnings that are printed once, never raised.

The tracer never breaks the app it observes: a failing store or endpoint, a wrong value type or an
overflowing queue is counted here and logged once per kind.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("llmtrace")
_lock = threading.Lock()
_counts: Counter[str] = Counter()
_warned: set[str] = set()


def count(kind: str, n: int = 1, message: str | None = None) -> None:
    with _lock:
        _counts[kind] += n
        first = kind not in _warned
        if first:
            _warned.add(kind)
    if first and message:
        log.warning("llmtrace: %s (further occurrences are counted in llmtrace.tracer.record.health.counters())", message)


def counters() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    with _lock:
        _counts.clear()
        _warned.clear()
