"""Small tests that tell an effect from run-to-run noise, without numpy: a rank test for two groups of
passes and a bootstrap interval for a difference of ratios. Analyzers that compare groups (slow against
fast streams, before against after a deploy) call these before they blame a stage."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from math import floor
from operator import itemgetter


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value that ``a`` and ``b`` come from one distribution (Mann-Whitney U, normal
    approximation with tie correction). 1.0 when either group is too small to tell."""
    xs = [float(v) for v in a if v is not None]
    ys = [float(v) for v in b if v is not None]
    n1, n2 = len(xs), len(ys)
    if n1 < 3 or n2 < 3:
        return 1.0
    allv = sorted([(v, 0) for v in xs] + [(v, 1) for v in ys])
    ranks = [0.0] * len(allv)
    ties = 0.0
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1][0] == allv[i][0]:
            j += 1
        r = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = r
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r1 = sum(r for r, (_, g) in zip(ranks, allv, strict=False) if g == 0)
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return max(0.0, min(1.0, math.erfc(max(0.0, z) / math.sqrt(2))))


def bootstrap_drop(before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]],
                   rounds: int = 400, seed: int = 0) -> tuple[float, float]:
    """(drop, lower bound) of ratio(before) - ratio(after), each group a list of (numerator, denominator)
    per pass (cached and prompt tokens), the lower bound at the 2.5th percentile of a bootstrap over the
    passes. A drop whose lower bound is above zero is beyond resampling noise."""
    def ratio(xs: Sequence[tuple[float, float]]) -> float:
        d = sum(y for _, y in xs)
        return sum(x for x, _ in xs) / d if d else 0.0

    point = ratio(before) - ratio(after)
    if len(before) < 3 or len(after) < 3:
        return point, -1.0
    rng = random.Random(seed)
    b, a = list(before), list(after)
    cap = 400  # resampling a few hundred passes per side is plenty for a bound
    if len(b) > cap:
        b = rng.sample(b, cap)
    if len(a) > cap:
        a = rng.sample(a, cap)
    draw = rng.random
    bx, by = [x for x, _ in b], [y for _, y in b]
    ax, ay = [x for x, _ in a], [y for _, y in a]
    drops = sorted(_resampled_ratio(bx, by, draw) - _resampled_ratio(ax, ay, draw) for _ in range(rounds))
    return point, drops[int(0.025 * rounds)]


def _resampled_ratio(xs: list[float], ys: list[float], draw: Callable[[], float]) -> float:
    """sum(x) / sum(y) over one bootstrap resample of the pairs: the draws and the order of the sums are
    those of ``random.choices(pairs, k=len(pairs))`` (so a seed gives the same bound), without building the
    resampled list of pairs twice over (diagnose runs 800 of these)."""
    n = len(xs)
    pick = itemgetter(*[floor(draw() * n) for _ in range(n)])
    d = sum(pick(ys))
    return sum(pick(xs)) / d if d else 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank-with-interpolation percentile of a small list (q in 0..1); None when empty."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def quantile_ratio_low(current: Sequence[float], baseline: Sequence[float] | None, q: float,
                       baseline_value: float | None = None, rounds: int = 400, seed: int = 0,
                       min_n: int = 5) -> float | None:
    """One-sided 95% lower bound of quantile_q(current) / quantile_q(baseline), by a bootstrap over the passes
    of both groups (or of ``current`` alone against a fixed ``baseline_value``, for a baseline file that kept
    no sample). None when a group is too small to tell (under ``min_n`` passes)."""
    return statistic_ratio_low(current, baseline, lambda xs: percentile(xs, q) or 0.0, baseline_value,
                               rounds=rounds, seed=seed, min_n=min_n)


def mean_ratio_low(current: Sequence[float], baseline: Sequence[float] | None, baseline_value: float | None = None,
                   rounds: int = 400, seed: int = 0, min_n: int = 5) -> float | None:
    """As :func:`quantile_ratio_low`, for the ratio of the means (cost per request)."""
    return statistic_ratio_low(current, baseline, lambda xs: sum(xs) / len(xs), baseline_value,
                               rounds=rounds, seed=seed, min_n=min_n)


def statistic_ratio_low(current: Sequence[float], baseline: Sequence[float] | None,
                        stat: Callable[[list[float]], float], baseline_value: float | None = None, *,
                        rounds: int = 400, seed: int = 0, min_n: int = 5) -> float | None:
    """One-sided 95% lower bound of stat(current) / stat(baseline) by a bootstrap over the passes of both
    groups, or of ``current`` alone against ``baseline_value`` when the baseline kept fewer than ``min_n``."""
    cur = [float(v) for v in current if v is not None]
    base = [float(v) for v in baseline or () if v is not None]
    if len(cur) < min_n or (len(base) < min_n and not baseline_value):
        return None
    rng = random.Random(seed)
    cap = 400
    cur = rng.sample(cur, cap) if len(cur) > cap else cur
    base = rng.sample(base, cap) if len(base) > cap else base
    ratios = []
    for _ in range(rounds):
        num = stat(rng.choices(cur, k=len(cur)))
        den = stat(rng.choices(base, k=len(base))) if len(base) >= min_n else float(baseline_value or 0)
        ratios.append(num / den if den > 0 else math.inf)
    ratios.sort()
    return ratios[int(0.05 * rounds)]


def ratio_drop_low(before: Sequence[tuple[float, float]] | None, after: Sequence[tuple[float, float]],
                   before_value: float | None = None, rounds: int = 400, seed: int = 0,
                   min_n: int = 3) -> float | None:
    """One-sided 95% lower bound of ratio(before) - ratio(after), each ratio sum(x) / sum(y) over per-pass
    (numerator, denominator) pairs (cached and prompt tokens), by a bootstrap over the passes of both groups,
    or of ``after`` alone against a fixed ``before_value`` (a baseline file that kept no passes). None when a
    group is too small to tell (under ``min_n`` passes)."""
    b = [(float(x), float(y)) for x, y in before or ()]
    a = [(float(x), float(y)) for x, y in after]
    if len(a) < min_n or (len(b) < min_n and before_value is None):
        return None
    rng = random.Random(seed)
    cap = 400
    b = rng.sample(b, cap) if len(b) > cap else b
    a = rng.sample(a, cap) if len(a) > cap else a
    draw = rng.random
    ax, ay = [x for x, _ in a], [y for _, y in a]
    bx, by = [x for x, _ in b], [y for _, y in b]
    drops = sorted((_resampled_ratio(bx, by, draw) if len(b) >= min_n else float(before_value or 0.0))
                   - _resampled_ratio(ax, ay, draw) for _ in range(rounds))
    return drops[int(0.05 * rounds)]
