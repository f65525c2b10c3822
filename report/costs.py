"""Cost per 1,000 calls by deploy, split into uncached input, cached input and output.

A pass records its price (``llmtrace.meters.cost_usd``) but not the price of each kind of token, and the
report may not read the adapters' price table (it sits above analyzers and tracer only). The split is
therefore recovered from the store itself: per model, the unit prices that best explain the recorded costs
(least squares over uncached, cached and output tokens). llmtrace's meters price a pass linearly in those
tokens, so the fit is exact for its own records; the fit's R² is shown so a poor one is not mistaken for
a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from llmtrace.analyzers.core.query import as_float, as_int

KINDS = ("uncached input", "cached input", "output")


@dataclass(frozen=True, slots=True)
class Prices:
    per_token: tuple[float, float, float]  # USD per uncached input, cached input, output token
    r2: float | None


@dataclass(frozen=True, slots=True)
class DeployCost:
    deploy: str
    passes: int
    per_1k: dict[str, float]  # kind -> USD per 1,000 calls
    recorded_per_1k: float | None
    split: bool  # False when no fit was possible: the total is shown unsplit


def fit_prices(s: Mapping[str, object]) -> Prices | None:
    """Least-squares unit prices from the sums of one model's passes (see ``ReportData.cost_sums``);
    None when nothing was priced or the fit is degenerate."""
    if not s.get("costed"):
        return None
    g = {k: as_float(s.get(k)) for k in ("uu", "uc", "uo", "cc", "co", "oo", "uy", "cy", "oy", "yy")}
    a = [[g["uu"], g["uc"], g["uo"]], [g["uc"], g["cc"], g["co"]], [g["uo"], g["co"], g["oo"]]]
    b = [g["uy"], g["cy"], g["oy"]]
    used = [i for i in range(3) if a[i][i] > 0]  # a kind of token never seen has no price to find
    if not used:
        return None
    x = _solve([[a[i][j] for j in used] for i in used], [b[i] for i in used])
    if x is None or any(not math.isfinite(v) or v < -1e-15 for v in x):  # a price is a finite number >= 0
        return None
    p = [0.0, 0.0, 0.0]
    for i, v in zip(used, x):
        p[i] = max(0.0, v)
    sse = g["yy"] - 2 * sum(p[i] * b[i] for i in range(3)) + sum(p[i] * a[i][j] * p[j] for i in range(3) for j in range(3))
    r2 = None if g["yy"] <= 0 else max(0.0, min(1.0, 1 - max(0.0, sse) / g["yy"]))
    return Prices((p[0], p[1], p[2]), r2)


@dataclass
class _DeploySum:
    passes: int = 0
    kinds: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # uncached, cached, output USD
    cost: float = 0.0
    costed: int = 0
    split: bool = True  # every model of the deploy had fitted prices


def by_deploy(sums: list[dict[str, object]]) -> tuple[list[DeployCost], float | None]:
    """Cost per 1,000 calls per deploy, split where each model's prices could be fitted; and the worst R²."""
    models: dict[str, dict[str, float]] = {}
    for s in sums:  # one fit per model over every deploy: a deploy changes prompts, not the price list
        m = models.setdefault(str(s["model"]), {})
        for k in ("costed", "uu", "uc", "uo", "cc", "co", "oo", "uy", "cy", "oy", "yy"):
            m[k] = m.get(k, 0.0) + as_float(s.get(k))
    prices = {name: fit_prices(m) for name, m in models.items()}
    r2s = [p.r2 for p in prices.values() if p is not None and p.r2 is not None]
    out: dict[str, _DeploySum] = {}
    for s in sums:
        d = out.setdefault(str(s["deploy"]), _DeploySum())
        d.passes += as_int(s["passes"])
        d.cost += as_float(s.get("cost"))
        d.costed += as_int(s.get("costed"))
        p = prices.get(str(s["model"]))
        if p is None:
            d.split = False
            continue
        for i, k in enumerate(("u", "c", "o")):
            d.kinds[i] += p.per_token[i] * as_float(s.get(k))
    rows = []
    for deploy, d in out.items():
        n = max(1, d.passes)
        recorded = 1000 * d.cost / d.costed if d.costed else None
        if d.split and d.costed:
            per = {KINDS[i]: 1000 * v / n for i, v in enumerate(d.kinds)}
        else:
            per = {"total (not split)": recorded or 0.0}
        rows.append(DeployCost(deploy, d.passes, per, recorded, bool(d.split and d.costed)))
    return rows, (min(r2s) if r2s else None)


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting on a small system; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    scale = max(abs(v) for row in a for v in row) or 1.0
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) <= 1e-12 * scale:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]
