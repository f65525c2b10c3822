"""The interval a gate decides from: a bootstrap over both sides' passes of the change ``llmtrace check``
compares (the hit rate's drop in points; TTFT's and cost's ratio current / baseline), its 5th and 95th
percentiles (each end a one-sided 95% bound). The gate passes when the whole interval is within the
allowance, fails when the whole interval is past it, and abstains (inconclusive) when the interval straddles
it, or when a side has too few passes to resample (``MIN_PASSES``). The same interval is printed beside each
verdict, so a reader sees what the gate saw.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from llmtrace.analyzers.core.stats import BOOT_CAP

ROUNDS = 400
LOW_Q, HIGH_Q = 0.05, 0.95
# Passes a side needs before it is resampled: fewer cannot tell a regression from one cold call (a fresh
# server's first prompt misses the cache and costs more) or one slow one.
MIN_PASSES = 3


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    def side_of(self, allowance: float) -> str:
        """pass (all within the allowance), fail (all past it) or inconclusive (it straddles the allowance)."""
        eps = 1e-12
        if self.high <= allowance + eps:
            return "pass"
        if self.low > allowance + eps:
            return "fail"
        return "inconclusive"


def _bounds(values: list[float]) -> Interval:
    values.sort()
    return Interval(values[int(LOW_Q * (len(values) - 1))], values[math.ceil(HIGH_Q * (len(values) - 1))])


T = TypeVar("T")


def _capped(rng: random.Random, xs: list[T]) -> list[T]:
    return rng.sample(xs, BOOT_CAP) if len(xs) > BOOT_CAP else xs


def drop_interval(baseline: Sequence[tuple[float, float]], current: Sequence[tuple[float, float]],
                  baseline_value: float | None = None, seed: int = 0) -> Interval | None:
    """The interval of ratio(baseline) - ratio(current), each ratio sum(cached) / sum(prompt) over (cached,
    prompt) pairs; ``baseline_value`` stands for a baseline that kept no passes (an older file). None when a
    side has fewer than MIN_PASSES."""
    b = [(float(x), float(y)) for x, y in baseline]
    c = [(float(x), float(y)) for x, y in current]
    if len(c) < MIN_PASSES or (len(b) < MIN_PASSES and baseline_value is None):
        return None
    rng = random.Random(seed)
    b, c = _capped(rng, b), _capped(rng, c)

    def rate(pairs: list[tuple[float, float]]) -> float:
        d = sum(y for _, y in pairs)
        return sum(x for x, _ in pairs) / d if d else 0.0

    fixed = None if len(b) >= MIN_PASSES else float(baseline_value or 0.0)
    drops = []
    for _ in range(ROUNDS):
        before = fixed if fixed is not None else rate(rng.choices(b, k=len(b)))
        drops.append(before - rate(rng.choices(c, k=len(c))))
    return _bounds(drops)


def ratio_interval(current: Sequence[float], baseline: Sequence[float], stat: Callable[[list[float]], float],
                   baseline_value: float | None = None, seed: int = 0) -> Interval | None:
    """The interval of stat(current) / stat(baseline) (a quantile, a mean); ``baseline_value`` as above."""
    c = [float(v) for v in current if v is not None]
    b = [float(v) for v in baseline if v is not None]
    if len(c) < MIN_PASSES or (len(b) < MIN_PASSES and not baseline_value):
        return None
    rng = random.Random(seed)
    b, c = _capped(rng, b), _capped(rng, c)
    ratios = []
    for _ in range(ROUNDS):
        num = stat(rng.choices(c, k=len(c)))
        den = stat(rng.choices(b, k=len(b))) if len(b) >= MIN_PASSES else float(baseline_value or 0.0)
        ratios.append(num / den if den > 0 else math.inf)
    return _bounds(ratios)
