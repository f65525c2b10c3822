"""Stop strings matched on decoded text, across token boundaries, without ever emitting a partial match.

Text that could still be the beginning of a stop string is held back; once it either completes a stop
string (the stream ends there, the stop string itself is not emitted) or can no longer match, it is released.
"""

from __future__ import annotations


class StopStringMatcher:
    __slots__ = ("stops", "_held", "holdback_max", "matched")

    def __init__(self, stops: tuple[str, ...] | list[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        self.stops = tuple(stops)
        self._held = ""
        self.holdback_max = 0  # most characters held back at once (the "chopped stop string" window)
        self.matched: str | None = None

    @property
    def held(self) -> str:
        return self._held

    def feed(self, text: str) -> tuple[str, bool]:
        """Add decoded text; return (text safe to emit, whether a stop string matched)."""
        if self.matched is not None:
            return "", True
        if not self.stops:
            return text, False
        buf = self._held + text
        # Earliest complete match wins (what the caller would see first).
        best: tuple[int, str] | None = None
        for stop in self.stops:
            at = buf.find(stop)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, stop)
        if best is not None:
            self.matched = best[1]
            self._held = ""
            return buf[: best[0]], True
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        self.holdback_max = max(self.holdback_max, keep)
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        """End of stream without a match: the held text was never a stop string, release it."""
        held, self._held = self._held, ""
        return held

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:n]):
                    best = n
                    break
        return best
