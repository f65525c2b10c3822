"""Meters: a price table per model, cost per pass and per trace, cache hit rate, deploy markers.

Prices are USD per million tokens for five kinds of token: uncached input, cached input (cache reads),
5-minute and 1-hour cache writes, and output. A pass is priced by the user's JSON file (argument >
``LLMTRACE_PRICES``) for the models it names, else by ``genai-prices`` (the ``prices`` extra, see
``prices.py``), else by the bundled table (``prices.json``, list prices at the time of writing). A model
none of them knows gets no cost at all rather than a guessed one.

The deploy on every span comes from ``llmtrace.init(deploy=...)`` (the ``service.version`` resource
attribute); ``mark_deploy`` adds the marker the cache-hit timeline shows.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmtrace.tracer import health
from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.settings import env

from .prices import NO_PRICE, PassPrice, from_genai_prices
from .usage import Usage

_BUNDLED = Path(__file__).with_name("prices.json")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    cached_input: float
    cache_write: float
    output: float
    cache_write_1h: float | None = None  # 1-hour cache writes (default: the 5-minute price)

    def __post_init__(self) -> None:
        for name in ("input", "cached_input", "cache_write", "output", "cache_write_1h"):
            v = getattr(self, name)
            if name == "cache_write_1h" and v is None:
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"price {name} must be a non-negative number, got {v!r}")

    def parts(self, usage: Usage) -> tuple[float, float, float, float] | None:
        """(total, cache reads, 5-minute writes, 1-hour writes) in USD; None when counts are missing."""
        if usage.input_tokens is None or usage.output_tokens is None or not usage.consistent:
            return None
        read = usage.cache_read_tokens or 0
        write = usage.cache_write_tokens or 0
        w1h = min(usage.cache_write_1h_tokens or 0, write)
        plain = max(usage.input_tokens - read - write, 0)
        read_usd = read * self.cached_input / 1e6
        w5_usd = (write - w1h) * self.cache_write / 1e6
        w1_usd = w1h * (self.cache_write if self.cache_write_1h is None else self.cache_write_1h) / 1e6
        total = (plain * self.input + usage.output_tokens * self.output) / 1e6 + read_usd + w5_usd + w1_usd
        return total, read_usd, w5_usd, w1_usd

    def cost(self, usage: Usage) -> float | None:
        """Price of one pass; None when the usage lacks the counts needed."""
        parts = self.parts(usage)
        return parts[0] if parts is not None else None


class PriceTable:
    """Model name -> Price, matched exactly or by the longest key that prefixes the name."""

    def __init__(self, prices: Mapping[str, Price], version: str | None = None) -> None:
        self._prices = dict(prices)
        self._keys = sorted(self._prices, key=len, reverse=True)
        self.version = version

    @classmethod
    def from_json(cls, data: Mapping[str, object], base: PriceTable | None = None) -> PriceTable:
        prices = dict(base._prices) if base is not None else {}
        version = data.get("_version")
        for model, spec in data.items():
            if model.startswith("_"):
                continue  # comments
            if not isinstance(spec, Mapping):
                raise ValueError(f"price entry for {model!r} must be an object")
            try:
                prices[model] = Price(
                    float(spec["input"]),
                    float(spec.get("cached_input", spec["input"])),
                    float(spec.get("cache_write", spec["input"])),
                    float(spec["output"]),
                    float(spec["cache_write_1h"]) if "cache_write_1h" in spec else None,
                )
            except KeyError as exc:
                raise ValueError(f"price entry for {model!r} lacks {exc.args[0]!r}") from None
        return cls(prices, str(version) if version is not None else None)

    def key_for(self, model: str | None) -> str | None:
        """The entry that prices ``model``: its exact name, else the longest key that prefixes it."""
        if not model:
            return None
        if model in self._prices:
            return model
        return next((key for key in self._keys if model.startswith(key)), None)

    def get(self, model: str | None) -> Price | None:
        key = self.key_for(model)
        return self._prices[key] if key is not None else None

    def __contains__(self, model: str) -> bool:
        return self.get(model) is not None


_table_lock = threading.Lock()
_table: PriceTable | None = None
_user_table: PriceTable | None = None  # only the user's own entries: they win over genai-prices


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceTable:
    """The bundled table overlaid with ``path`` (or ``$LLMTRACE_PRICES``); becomes the table in use."""
    global _table, _user_table
    bundled = PriceTable.from_json(json.loads(_BUNDLED.read_text()))
    table, user_table = bundled, None
    user = path if path is not None else env("LLMTRACE_PRICES")
    if user is not None:
        p = Path(user)
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read price table {p}: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ValueError(f"price table {p} must be a JSON object of model -> prices")
        if Path(p).resolve() != _BUNDLED.resolve():
            user_table = PriceTable.from_json(data)
            user_table.version = user_table.version or f"user file {p.name}"
        table = PriceTable.from_json(data, base=bundled)
        table.version = bundled.version
    with _table_lock:
        _table, _user_table = table, user_table
    return table


def price_table() -> PriceTable:
    t = _table
    if t is None:
        try:
            t = load_prices()
        except ValueError as exc:  # a broken user file must not break the app: fall back, say so once
            health.count("price_table", message=str(exc))
            t = load_prices(_BUNDLED)
    return t


def price_pass(
    model: str | None, usage: Usage, fallback_model: str | None = None, provider: str | None = None
) -> PassPrice:
    """A pass priced as ``model`` (the served one), else as ``fallback_model`` (the requested one): by the
    user's file, then genai-prices, then the bundled table (see ``prices.py``)."""
    table = price_table()
    names = [m for m in (model, fallback_model) if m]
    if not usage.consistent or usage.input_tokens is None or usage.output_tokens is None:
        return NO_PRICE
    user = _user_table
    if user is not None:
        for name in names:
            if user.get(name) is not None:
                return _from_table(user, name, usage, "user")
    for name in names:
        priced = from_genai_prices(name, usage, provider)
        if priced is not None:
            return priced
    for name in names:
        if table.get(name) is not None:
            return _from_table(table, name, usage, "bundled")
    return NO_PRICE


def _from_table(table: PriceTable, name: str, usage: Usage, source: str) -> PassPrice:
    price = table.get(name)
    parts = price.parts(usage) if price is not None else None
    if parts is None:
        return NO_PRICE
    version = table.version or ("prices.json" if source == "bundled" else "user file")
    return PassPrice(parts[0], source, version, table.key_for(name), parts[1], parts[2], parts[3])


def pass_cost(model: str | None, usage: Usage, fallback_model: str | None = None) -> float | None:
    """Cost of a pass priced as ``model`` (the served one), else as ``fallback_model`` (the requested one)."""
    return price_pass(model, usage, fallback_model).cost


class TraceCosts:
    """Running cost per trace in this process (bounded: the oldest traces are forgotten first)."""

    def __init__(self, max_traces: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._costs: OrderedDict[str, float] = OrderedDict()
        self._max = max_traces

    def add(self, trace_id: str, cost: float) -> float:
        with self._lock:
            total = self._costs.pop(trace_id, 0.0) + cost
            self._costs[trace_id] = total
            while len(self._costs) > self._max:
                self._costs.popitem(last=False)
            return total

    def get(self, trace_id: str) -> float:
        with self._lock:
            return self._costs.get(trace_id, 0.0)


trace_costs = TraceCosts()


def current_deploy() -> str | None:
    """The deploy given to ``llmtrace.init`` (also on every span as the ``service.version`` resource)."""
    from llmtrace.tracer.record.lifecycle import current_settings

    s = current_settings()
    return s.deploy if s is not None else None


def accounting_values(
    model: str | None, usage: Usage, fallback_model: str | None = None, provider: str | None = None
) -> dict[str, object]:
    """Boundary values of ``meters.cache_accounting`` for one pass."""
    return {
        N.METERS_CACHE_HIT_RATE: usage.hit_rate,
        N.METERS_CACHED_TOKENS: usage.cache_read_tokens,
        N.METERS_UNCACHED_TOKENS: usage.uncached_tokens,
        **price_pass(model, usage, fallback_model, provider).values(),
        N.SERVICE_VERSION: current_deploy(),
        N.METERS_USAGE_CONSISTENT: usage.consistent,
    }


def record_accounting(
    model: str | None, usage: Usage, parent: rec.PassSpan | None = None
) -> dict[str, object]:
    """App-side use: emit ``meters.cache_accounting`` for a pass whose usage the app holds; the cost
    also goes on the pass span and into the trace's running total."""
    values = accounting_values(model, usage)
    t = rec.now_ns()
    rec.record_stage(S.METERS_CACHE_ACCOUNTING, start_ns=t, end_ns=t, values=values, parent=parent)
    cost = values[N.METERS_COST_USD]
    if parent is not None and isinstance(cost, float):
        parent.set(N.METERS_COST_USD, cost)
        parent.set(N.METERS_TRACE_COST_USD, trace_costs.add(parent.trace_id, cost))
    return values


# ── reading the store (short read connections; never held open) ──────────────────────────────
def trace_cost(db: str | os.PathLike[str], trace_id: str) -> float:
    """Sum of pass costs of one trace in the store (client passes only, so nothing counts twice)."""
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(cost_usd), 0) FROM requests "
            "WHERE trace_id = ? AND side IN ('client', 'app')",
            [trace_id],
        ).fetchone()
    return float(row[0]) if row else 0.0


def cache_hit_rate(
    db: str | os.PathLike[str], deploy: str | None = None, side: str = "client"
) -> float | None:
    """Cached over all prompt tokens across passes (optionally of one deploy); None when nothing counted."""
    from llmtrace.tracer.storage.store import read_connection

    sql = (
        "SELECT sum(cached_tokens), sum(prompt_tokens) FROM requests "
        "WHERE side = ? AND prompt_tokens IS NOT NULL AND cached_tokens IS NOT NULL"
    )
    params: list[object] = [side]
    if deploy is not None:
        sql += " AND deploy = ?"
        params.append(deploy)
    with read_connection(db) as conn:
        row = conn.execute(sql, params).fetchone()
    if not row or not row[1]:
        return None
    return float(row[0]) / float(row[1])


def mark_deploy(
    db: str | os.PathLike[str], name: str, note: str | None = None, service: str | None = None
) -> None:
    """Add a deploy marker to the store (what ``llmtrace deploy mark`` does)."""
    from llmtrace.tracer.storage.store import mark_deploy as _mark

    _mark(db, name, note, service)
