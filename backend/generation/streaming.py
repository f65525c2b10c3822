"""Per-chunk timestamps of one stream: time to first chunk and the gaps between chunks."""

from __future__ import annotations

from llmtrace.tracer.registry import names as N


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (q in [0, 100])."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class StreamClock:
    __slots__ = ("arrival_ns", "chunk_ns")

    def __init__(self, arrival_ns: int) -> None:
        self.arrival_ns = arrival_ns
        self.chunk_ns: list[int] = []  # when each non-empty text delta was produced

    def chunk(self, now_ns: int) -> None:
        self.chunk_ns.append(now_ns)

    @property
    def ttft_ms(self) -> float | None:
        return (self.chunk_ns[0] - self.arrival_ns) / 1e6 if self.chunk_ns else None

    def since_arrival_ms(self, ns: int | None) -> float | None:
        return None if ns is None else (ns - self.arrival_ns) / 1e6

    def gaps_ms(self) -> list[float]:
        return [(b - a) / 1e6 for a, b in zip(self.chunk_ns, self.chunk_ns[1:], strict=False)]

    def values(self) -> dict[str, object]:
        gaps = sorted(self.gaps_ms())
        ttft = self.ttft_ms
        return {
            N.STREAM_CHUNKS: len(self.chunk_ns),
            N.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: None if ttft is None else ttft / 1e3,
            N.STREAM_ITL_P50_MS: percentile(gaps, 50.0),
            N.STREAM_ITL_P99_MS: percentile(gaps, 99.0),
        }
