"""Targets the user set: the reference a setting's expected cost is measured against.

A setting the user chose on purpose (batch-invariant kernels, speculation off, a small pool) has an expected
cost; a finding about that cost is only worth more than info when it breaches a target the user set. The
targets resolve like every setting (``tracer/settings.py``): the environment variable, else none.

    LLMTRACE_TARGET_TTFT_MS   time to first token a pass should stay under
    LLMTRACE_TARGET_TPOT_MS   time per output token a stream should stay under
"""

from __future__ import annotations

from dataclasses import dataclass

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
