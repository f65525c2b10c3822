"""Results remembered by the digest of the text they were computed from.

A conversation sends its whole history with every request, so the middleware and the collector see the
same turns again on every call. The per-text work (scanning for instructions, reading passage shapes,
hashing a segment's chunks and volatile values) is remembered by a 128-bit BLAKE2b digest of the text, so
a request costs work in proportion to what is new in it plus one C-speed hash of the rest.

Only digests and what was computed are kept, never the text. A full cache is cleared whole: no order to
keep, nothing to race on between threads (single dict operations are atomic under the GIL), and the next
calls fill it again with what is current.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


def digest(text: str) -> bytes:
    """16 bytes of BLAKE2b over the UTF-8 text (lone surrogates kept, so any str has one)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class DigestCache(Generic[V]):
    """A bounded map from digests to computed results, cleared whole when it reaches ``max_entries`` or,
    where ``weigh`` says what a result costs to keep (e.g. its length), ``max_weight`` in all."""

    __slots__ = ("_max", "_max_weight", "_seen", "_weigh", "_weight")

    def __init__(self, max_entries: int, *, weigh: Callable[[V], int] | None = None, max_weight: int = 0) -> None:
        if max_entries < 1 or (weigh is not None and max_weight < 1):
            raise ValueError("max_entries (and max_weight, with weigh) must be >= 1")
        self._max = max_entries
        self._weigh = weigh
        self._max_weight = max_weight
        self._weight = 0
        self._seen: dict[bytes, V] = {}

    def remember(self, key: bytes, compute: Callable[[], V]) -> V:
        """The result kept under ``key``, or ``compute()``'s, kept for next time (``None`` is a result too)."""
        try:
            return self._seen[key]
        except KeyError:
            pass
        value = compute()
        weight = self._weigh(value) if self._weigh is not None else 0
        if len(self._seen) >= self._max or (weight and self._weight + weight > self._max_weight):
            self.clear()
        if weight <= self._max_weight:  # one result heavier than the whole budget is not kept
            self._seen[key] = value
            self._weight += weight
        return value

    def clear(self) -> None:
        self._seen.clear()
        self._weight = 0

    def __len__(self) -> int:
        return len(self._seen)

    def items(self) -> list[tuple[bytes, V]]:
        """A snapshot of what is kept (for tests that check no text is)."""
        return list(self._seen.items())
