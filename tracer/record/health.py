"""Counters for what the tracer dropped, and warnings that are printed once, never raised.

The tracer never breaks the app it observes: a failing store or endpoint, a wrong value type or an
overflowing queue is counted here and logged once per kind.

Kinds: ``dropped_spans`` (every span lost, whatever the reason: what ``llmtrace.shutdown`` reports) and,
from the store writer (``storage/span_writer.py``), the same spans once more by reason:
``dropped_spans_queue_full`` (the oldest, at the writer's cap), ``dropped_spans_not_written`` (still
queued at the shutdown deadline), ``dropped_spans_store_error`` / ``dropped_spans_store_full`` /
``dropped_spans_refused`` (the store cannot be written, is at its size cap, refused a value) and
``dropped_spans_closed``; ``sanitized_values`` (values repaired to fit the store, the span kept).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from llmtrace.tracer.storage import drop_count

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


drop_count.set_counter(count)  # the store's converter and writer sit below this layer; they count here
