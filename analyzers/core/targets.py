"""Targets the user set: the reference a setting's expected cost is measured against.

A setting the user chose on purpose (batch-invariant kernels, speculation off, a small pool) has an expected
cost; a finding about that cost is only worth more than info when it breaches a target the user set. The
targets resolve like every setting (``tracer/settings.py``): the environment variable, else none.

    LLMTRACE_TARGET_TTFT_MS   time to first token a pass should stay under
    LLMTRACE_TARGET_TPOT_MS   time per output token a stream should stay under
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.settings import resolve

TTFT_ENV = "LLMTRACE_TARGET_TTFT_MS"
TPOT_ENV = "LLMTRACE_TARGET_TPOT_MS"


@dataclass(frozen=True, slots=True)
class Targets:
    ttft_ms: float | None = None
    tpot_ms: float | None = None


def _ms(env: str) -> float | None:
    value = resolve(None, env, None)
    try:
        ms = float(value) if value is not None else None
    except ValueError:
        return None  # a target that is not a number is no target (the finding says none was set)
    return ms if ms is not None and ms > 0 else None


def targets() -> Targets:
    """The targets set for this run (read when asked: a test or a CI step may set them per run)."""
    return Targets(ttft_ms=_ms(TTFT_ENV), tpot_ms=_ms(TPOT_ENV))


@dataclass(frozen=True, slots=True)
class TtftReading:
    """Passes measured against the user's TTFT target: how many had a first token, how many came over it."""

    target_ms: float
    timed: int
    over: int
    p90_ms: float | None

    @property
    def share_over(self) -> float:
        return self.over / self.timed if self.timed else 0.0

    @property
    def breached(self) -> bool:
        return self.over > 0

    def says(self) -> str:
        """One clause for a finding's text."""
        if not self.timed:
            return f"no pass had a first token to hold to the TTFT target of {self.target_ms:g} ms ({TTFT_ENV})"
        if not self.over:
            return (f"every pass stayed within the TTFT target of {self.target_ms:g} ms ({TTFT_ENV}; p90 "
                    f"{self.p90_ms or 0:.0f} ms)")
        return (f"{self.over} of {self.timed} passes breached the TTFT target of {self.target_ms:g} ms ({TTFT_ENV}; "
                f"p90 {self.p90_ms or 0:.0f} ms)")


def ttft_reading(q: Query, src: str, ttft: str = "ttft_ms") -> TtftReading | None:
    """The TTFT target held against the passes of ``src`` (a relation with a ``ttft`` column), or None when the
    user set no target."""
    target = targets().ttft_ms
    if target is None:
        return None
    r = q.one(f"""SELECT count({ttft}) AS timed, count(*) FILTER (WHERE {ttft} > {float(target)!r}) AS over,
                         quantile_cont({ttft}, 0.9) AS p90 FROM {src}""")
    p90 = r.get("p90")
    return TtftReading(target, int(r.get("timed") or 0), int(r.get("over") or 0),
                       float(p90) if p90 is not None else None)
