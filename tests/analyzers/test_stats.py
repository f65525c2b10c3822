"""analyzers/core/stats.py's bootstraps give the numbers of the plain ``random.choices`` resampling they replace: the
same seed, the same draws in the same order, the same bounds (diagnose's and check's verdicts rest on them)."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence

import pytest

from llmtrace.analyzers.core import stats


def _ratio(xs: Sequence[tuple[float, float]]) -> float:
    d = sum(y for _, y in xs)
    return sum(x for x, _ in xs) / d if d else 0.0


def _drops(before: list[tuple[float, float]], after: list[tuple[float, float]], rounds: int, seed: int,
           fixed: float | None) -> list[float]:
    """The plain bootstrap: cut each group to 400 at random, then resample both with random.choices."""
    rng = random.Random(seed)
    b = rng.sample(before, 400) if len(before) > 400 else before
    a = rng.sample(after, 400) if len(after) > 400 else after
    out = []
    for _ in range(rounds):
        rb = fixed if fixed is not None else _ratio(rng.choices(b, k=len(b)))
        out.append(rb - _ratio(rng.choices(a, k=len(a))))
    return sorted(out)


def _plain_statistic_low(cur: list[float], base: list[float], stat: Callable[[list[float]], float],
                         baseline_value: float | None, rounds: int, seed: int, min_n: int) -> float | None:
    if len(cur) < min_n or (len(base) < min_n and not baseline_value):
        return None
    rng = random.Random(seed)
    cur = rng.sample(cur, 400) if len(cur) > 400 else cur
    base = rng.sample(base, 400) if len(base) > 400 else base
    ratios = []
    for _ in range(rounds):
        num = stat(rng.choices(cur, k=len(cur)))
        den = stat(rng.choices(base, k=len(base))) if len(base) >= min_n else float(baseline_value or 0)
        ratios.append(num / den if den > 0 else float("inf"))
    return sorted(ratios)[int(0.05 * rounds)]


def _groups(nb: int, na: int, seed: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    r = random.Random(seed)
    b = [(float(r.randrange(0, 900)), float(r.randrange(900, 1000))) for _ in range(nb)]
    a = [(r.random() * 500, float(r.randrange(500, 1000))) for _ in range(na)]
    return b, a


SIZES = [(3, 3), (5, 50), (50, 4), (399, 401), (1000, 2500)]


@pytest.mark.parametrize(("nb", "na"), SIZES)
@pytest.mark.parametrize("seed", [0, 5])
def test_bootstrap_drop_is_the_plain_bootstrap(nb: int, na: int, seed: int) -> None:
    b, a = _groups(nb, na, seed)
    point, low = stats.bootstrap_drop(b, a, seed=seed)
    assert point == _ratio(b) - _ratio(a)
    assert low == _drops(b, a, 400, seed, None)[int(0.025 * 400)]


@pytest.mark.parametrize(("nb", "na"), [*SIZES, (2, 10), (1, 10), (0, 10)])
@pytest.mark.parametrize("seed", [0, 5])
def test_ratio_drop_low_is_the_plain_bootstrap(nb: int, na: int, seed: int) -> None:
    b, a = _groups(nb, na, seed + 1)
    if nb >= 3:
        assert stats.ratio_drop_low(b, a, seed=seed) == _drops(b, a, 400, seed, None)[20]
    else:
        assert stats.ratio_drop_low(b or None, a, seed=seed) is None
    # a baseline that kept too few passes: its fixed value against the resampled current passes
    assert stats.ratio_drop_low(b[:2], a, before_value=0.8, seed=seed, rounds=200) \
        == _drops(b[:2], a, 200, seed, 0.8)[10]


def test_both_bounds_share_one_set_of_draws() -> None:
    """check's 5th percentile and diagnose's 2.5th are read off the same sorted drops of one seed."""
    b, a = _groups(600, 700, 3)
    drops = _drops(b, a, 400, 0, None)
    assert stats.bootstrap_drop(b, a)[1] == drops[10]
    assert stats.ratio_drop_low(b, a) == drops[20]


@pytest.mark.parametrize(("nc", "nb"), [(1, 1), (5, 5), (40, 3), (450, 1200)])
@pytest.mark.parametrize("q", [0.5, 0.95])
def test_quantile_and_mean_bounds_are_the_plain_bootstrap(nc: int, nb: int, q: float) -> None:
    r = random.Random(nc * 7 + nb)
    cur = [r.random() * 100 for _ in range(nc)]
    base = [r.random() * 80 for _ in range(nb)]
    def quant(xs: list[float]) -> float:
        return stats.percentile(xs, q) or 0.0

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    for min_n in (1, 5):
        assert stats.quantile_ratio_low(cur, base, q, min_n=min_n) \
            == _plain_statistic_low(cur, base, quant, None, 400, 0, min_n)
        assert stats.mean_ratio_low(cur, base, min_n=min_n, seed=2) \
            == _plain_statistic_low(cur, base, mean, None, 400, 2, min_n)
        assert stats.quantile_ratio_low(cur, base[:0], q, baseline_value=50.0, min_n=min_n) \
            == _plain_statistic_low(cur, [], quant, 50.0, 400, 0, min_n)


@pytest.mark.parametrize(("nb", "na"), [(1, 3), (3, 3), (50, 7), (1000, 2500)])
def test_whole_token_counts_give_the_same_drops_with_and_without_numpy(
        nb: int, na: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token counts are whole numbers: with numpy loaded the rounds run vectorised, bit for bit the drops of
    the plain loop (the same random numbers, indices and exact sums)."""
    np = pytest.importorskip("numpy")
    r = random.Random(nb + na)
    b = [(float(r.randrange(0, 900)), float(r.randrange(1, 1000))) for _ in range(nb)]
    a = [(float(r.randrange(0, 500)), float(r.randrange(0, 3))) for _ in range(na)]  # some zero denominators
    monkeypatch.setitem(sys.modules, "numpy", np)
    with_numpy = stats._resampled_drops(b, a, 300, 4), stats._resampled_drops(b, a, 300, 4, fixed=0.25)
    assert with_numpy == (_drops(b, a, 300, 4, None), _drops(b, a, 300, 4, 0.25))
    monkeypatch.delitem(sys.modules, "numpy")
    assert (stats._resampled_drops(b, a, 300, 4), stats._resampled_drops(b, a, 300, 4, fixed=0.25)) == with_numpy
