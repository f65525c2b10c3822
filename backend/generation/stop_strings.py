"""Stop strings matched on decoded text, across token boundaries, without ever emitting a partial match.

Text that could still be the beginning of a stop string is held back; once it either completes a stop
string (the stream ends there, the stop string itself is not emitted) or can no longer match, it is released.
"""

from __future__ import annotations

# The most characters a matcher holds back (None: as many as the longest stop string needs). ``llmtrace serve
# --stop-holdback N`` caps it for the whole server, to reproduce a streaming server whose window is shorter
# than its stop strings: their first characters reach the client before the match is known.
_default_max_hold: int | None = None


def set_default_max_hold(n: int | None) -> None:
    global _default_max_hold
    if n is not None and n < 0:
        raise ValueError(f"stop hold-back must be >= 0, got {n}")
    _default_max_hold = n


class StopStringMatcher:
    __slots__ = ("stops", "_held", "holdback_max", "matched", "max_hold", "_shown_tail", "leaked_chars")

    def __init__(self, stops: tuple[str, ...] | list[str], *, max_hold: int | None = None) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        self.stops = tuple(stops)
        self._held = ""
        self.holdback_max = 0  # most characters held back at once (the "chopped stop string" window)
        self.matched: str | None = None
        self.max_hold = _default_max_hold if max_hold is None else max_hold
        self._shown_tail = ""  # with a capped window: the end of what was emitted, so a match across it is seen
        self.leaked_chars = 0  # characters of the matched stop string emitted before the match was known

    @property
    def held(self) -> str:
        return self._held

    def feed(self, text: str) -> tuple[str, bool]:
        """Add decoded text; return (text safe to emit, whether a stop string matched)."""
        if self.matched is not None:
            return "", True
        if not self.stops:
            return text, False
        shown = self._shown_tail
        buf = shown + self._held + text
        # Earliest complete match wins (what the caller would see first).
        best: tuple[int, str] | None = None
        for stop in self.stops:
            at = buf.find(stop)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, stop)
        if best is not None:
            self.matched = best[1]
            self._held = ""
            self.leaked_chars = max(0, len(shown) - best[0])
            return buf[len(shown): max(best[0], len(shown))], True
        buf = buf[len(shown):]
        keep = self._partial_suffix(buf)
        if self.max_hold is not None:
            keep = min(keep, self.max_hold)
        self._held = buf[len(buf) - keep:] if keep else ""
        self.holdback_max = max(self.holdback_max, keep)
        out = buf[: len(buf) - keep]
        if self.max_hold is not None:
            longest = max(len(s) for s in self.stops)
            self._shown_tail = (shown + out)[-(longest - 1):] if longest > 1 else ""
        return out, False

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
