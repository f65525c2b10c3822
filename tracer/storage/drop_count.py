"""Where the store's converter and writer count what they repair or drop: a hook the recording layer sets
(``record/health.py`` installs its counters when imported), in a module of its own so that setting it
imports neither pyarrow nor duckdb (``import llmtrace`` in an app stays light until ``init(db=...)``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("llmtrace")
Counter = Callable[[str, int, "str | None"], None]


def _log_count(kind: str, n: int = 1, message: str | None = None) -> None:
    if message:
        log.warning("llmtrace: %s (%s: %d)", message, kind, n)


_count: Counter = _log_count


def set_counter(fn: Counter) -> None:
    """Where repairs and drops are counted from now on."""
    global _count
    _count = fn


def count(kind: str, n: int = 1, message: str | None = None) -> None:
    _count(kind, n, message)
