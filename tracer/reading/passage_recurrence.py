"""Passages met again beside other passages: what tells passages a search retrieved from text a user pasted.

A search over the same material returns the same passage for many questions, each time beside others; a
letter, a log or an article a user pastes is new each time, or comes back whole with the same neighbours
(the same text asked about again). The middleware and the collector see one prompt at a time, so this keeps,
per passage, the set of passages it was last seen in: in-memory keys only, never text, bounded and cleared
whole when full (as digest_cache.py's caches are). The process keeps one, ``memory.passages`` (memory.py).
The first prompt of a process counts as new; the analyzers read many prompts.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

MAX_PASSAGES = 8192  # passages remembered (about 1 MB): a knowledge base's busy part, not all of it


class PassageCompany:
    """Per passage key, the set of passages (joined keys) it was last seen in."""

    def __init__(self, max_passages: int = MAX_PASSAGES) -> None:
        self._last: dict[str, str] = {}
        self._lock = threading.Lock()
        self._max = max_passages

    def met_in_other_company(self, keys: Sequence[str]) -> bool:
        """Whether a passage of ``keys`` (a prompt's distinct passages) was seen before in a prompt whose
        passages were another set. This prompt's set is remembered for each of them either way."""
        company = ",".join(sorted(keys))
        last = self._last
        with self._lock:
            again = any(last.get(k, company) != company for k in keys)
            if len(last) + len(keys) > self._max:
                last.clear()
            for k in keys:
                last[k] = company
        return again

    def clear(self) -> None:
        with self._lock:
            self._last.clear()
