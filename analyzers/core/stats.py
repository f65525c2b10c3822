"""Small tests that tell an effect from run-to-run noise, without numpy: a rank test for two groups of
passes and a bootstrap interval for a difference of ratios. Analyzers that compare groups (slow against
fast streams, before against after a deploy) call these before they blame a stage."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Sequence
from itertools import islice
from math import floor
from operator import itemgetter
from typing import Any

BOOT_CAP = 400  # passes per group a bootstrap resamples (a random subset past it): plenty for a bound


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
    return point, _resampled_drops(before, after, rounds, seed)[int(0.025 * rounds)]


def _resampled_drops(before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]], rounds: int,
                     seed: int, fixed: float | None = None) -> list[float]:
    """ratio(before) - ratio(after) over ``rounds`` bootstrap resamples of both groups' passes, sorted; with
    ``fixed``, that value stands for ratio(before) and only ``after`` is resampled. Each group is first cut to a
    random BOOT_CAP of its passes. One seed gives the same draws, in the same order, to every caller."""
    rng = random.Random(seed)
    b, a = list(before), list(after)
    if len(b) > BOOT_CAP:
        b = rng.sample(b, BOOT_CAP)
    if len(a) > BOOT_CAP:
        a = rng.sample(a, BOOT_CAP)
    draw = rng.random
    bx, by = [x for x, _ in b], [y for _, y in b]
    ax, ay = [x for x, _ in a], [y for _, y in a]
    np = sys.modules.get("numpy")  # (only where something loaded it already: importing it costs more than it saves)
    if np is not None and _whole(bx, by, ax, ay):
        return _numpy_drops(np, rng, bx, by, ax, ay, rounds, fixed)
    if fixed is not None:
        return sorted(fixed - _resampled_ratio(ax, ay, draw) for _ in range(rounds))
    return sorted(_resampled_ratio(bx, by, draw) - _resampled_ratio(ax, ay, draw) for _ in range(rounds))


def _whole(*groups: list[float]) -> bool:
    """Whether every value is a whole number small enough that any order of summing a resample is exact (token
    counts are): then numpy's sums equal Python's left-to-right ones to the last bit."""
    return all(all(v.is_integer() and abs(v) < 2.0 ** 40 for v in g) for g in groups)


def _numpy_drops(np: Any, rng: random.Random, bx: list[float], by: list[float], ax: list[float], ay: list[float],
                 rounds: int, fixed: float | None) -> list[float]:
    """:func:`_resampled_drops`' rounds with numpy, for whole-number values (:func:`_whole`): the same random
    numbers (``random()`` is two 32-bit words of the generator, ``(a >> 5) * 2**26 + (b >> 6)`` over 2**53; here
    read in one ``getrandbits``), the same indices ``floor(r * n)``, sums that are exact in any order, the same
    divisions and differences: the same sorted drops, bit for bit."""
    nb, na = (0 if fixed is not None else len(bx)), len(ax)
    words = np.frombuffer(rng.getrandbits(64 * rounds * (nb + na)).to_bytes(8 * rounds * (nb + na), "little"),
                          dtype="<u4")
    r = ((words[0::2] >> 5).astype(np.float64) * 67108864.0 + (words[1::2] >> 6)) * (1.0 / 9007199254740992.0)
    r = r.reshape(rounds, nb + na)

    def ratios(u: Any, xs: list[float], ys: list[float]) -> Any:
        idx = np.floor(u * float(len(xs))).astype(np.int64)
        num, den = np.asarray(xs)[idx].sum(axis=1), np.asarray(ys)[idx].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den != 0, num / np.where(den != 0, den, 1.0), 0.0)

    after = ratios(r[:, nb:], ax, ay)
    before = np.full(rounds, float(fixed)) if fixed is not None else ratios(r[:, :nb], bx, by)
    return sorted((before - after).tolist())


def _resampled_ratio(xs: list[float], ys: list[float], draw: Callable[[], float]) -> float:
    """sum(x) / sum(y) over one bootstrap resample of the pairs: the draws and the order of the sums are
    those of ``random.choices(pairs, k=len(pairs))`` (so a seed gives the same bound), without building the
    resampled list of pairs twice over (diagnose runs 800 of these)."""
    pick = _picker(len(xs), draw)
    d = sum(pick(ys))
    return sum(pick(xs)) / d if d else 0.0


def _picker(n: int, draw: Callable[[], float]) -> Callable[[list[float]], tuple[float, ...]]:
    """The n items of one resample of a list of n, as a tuple: index ``floor(draw() * n)`` each, the draws of
    ``random.choices`` (its loop, with the random numbers read in C: ``iter(draw, None)`` never stops)."""
    if n == 1:
        floor(draw())  # (the one draw a list of one takes, so the draws after it stay the same)
        return lambda xs: (xs[0],)
    return itemgetter(*[floor(r * n) for r in islice(iter(draw, None), n)])


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
    cur = rng.sample(cur, BOOT_CAP) if len(cur) > BOOT_CAP else cur
    base = rng.sample(base, BOOT_CAP) if len(base) > BOOT_CAP else base
    draw = rng.random
    ratios = []
    for _ in range(rounds):
        num = stat(list(_picker(len(cur), draw)(cur)))
        den = stat(list(_picker(len(base), draw)(base))) if len(base) >= min_n else float(baseline_value or 0)
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
    fixed = None if len(b) >= min_n else float(before_value or 0.0)
    return _resampled_drops(b, a, rounds, seed, fixed)[int(0.05 * rounds)]
