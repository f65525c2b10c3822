"""Pricing one pass from a maintained price database, with the bundled table as the fallback.

Order: the user's own file (``LLMTRACE_PRICES`` / ``meters.load_prices(path)``) for the models it names;
then pydantic's ``genai-prices`` (the optional ``prices`` extra: 800+ models with cache read and 5-minute
and 1-hour cache write prices, tiers and price changes over time); then the bundled ``prices.json``. A
model none of them knows gets no cost. Every priced pass says which source and which version priced it,
and what its cache reads and its 5-minute and 1-hour cache writes cost on their own.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from llmtrace.tracer import health
from llmtrace.tracer.record.price_terms import token_rates, token_total
from llmtrace.tracer.record.runtime import runtime
from llmtrace.tracer.record.usage import Usage
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.settings import env

_MAX_FOUND = 4096


def _lib() -> Any:
    """genai-prices, imported on first use (it brings pydantic: ~0.4 s, not to be paid by every import of
    the middleware); None when it is not installed."""
    st = _state
    if st.gp is None:
        with st.load_lock:
            if st.gp is None:
                try:  # optional: data plus pydantic; without it the bundled table prices the common models
                    import genai_prices

                    genai_prices.data_snapshot.get_snapshot()  # parse the bundled data now, once
                    st.gp = genai_prices
                except ImportError:
                    st.gp = False
    return st.gp or None


def warm_up() -> None:
    """Load genai-prices in the background so the first priced pass does not wait for it."""
    if _state.gp is None:
        threading.Thread(target=_lib, name="llmtrace-prices", daemon=True).start()


def _find(model: str, provider: str | None) -> tuple[Any, Any, Any] | None:
    """(snapshot, provider, model entry) for a name, remembered: matching a name against 800+ models costs
    ~60 us, pricing the match ~10 us. The price itself is still chosen by date at every call."""
    snapshot = _state.gp.data_snapshot.get_snapshot()
    key = (id(snapshot), model, provider)
    found = _state.found
    if key in found:
        return found[key]
    try:
        prov, entry = snapshot.find_provider_model(model, None, provider, None)
        hit: tuple[Any, Any, Any] | None = (snapshot, prov, entry)
    except LookupError:
        hit = None
    if len(found) >= _MAX_FOUND:
        found.clear()
    found[key] = hit
    return hit


@dataclass(frozen=True, slots=True)
class PassPrice:
    cost: float | None
    source: str | None = None  # user, genai-prices, bundled
    version: str | None = None
    model: str | None = None  # the price entry that matched
    cache_read: float | None = None
    cache_write_5m: float | None = None
    cache_write_1h: float | None = None

    def values(self) -> dict[str, object]:
        return {
            N.METERS_COST_USD: self.cost,
            N.METERS_PRICE_SOURCE: self.source,
            N.METERS_PRICE_VERSION: self.version,
            N.METERS_PRICE_MODEL: self.model,
            N.METERS_CACHE_READ_COST_USD: self.cache_read,
            N.METERS_CACHE_WRITE_5M_COST_USD: self.cache_write_5m,
            N.METERS_CACHE_WRITE_1H_COST_USD: self.cache_write_1h,
        }


NO_PRICE = PassPrice(None)


def _per_token(model_price: Any, key: str) -> Decimal | None:
    # its own attributes: getattr of an unset kind goes through genai-prices' registry (~10 us each)
    v = vars(model_price).get(key)
    return v / Decimal(1_000_000) if isinstance(v, Decimal) else None  # tiered prices: no split


def _usd(tokens: int | None, per_token: Decimal | None) -> float | None:
    if per_token is None:
        return None
    return float(Decimal(tokens or 0) * per_token)


def from_genai_prices(model: str, usage: Usage, provider: str | None) -> PassPrice | None:
    """The pass priced by ``genai-prices``; None when it is not installed or does not know the model."""
    inp, out = usage.input_tokens, usage.output_tokens
    gp = _lib() if inp is not None and out is not None else None
    if gp is None or inp is None or out is None:
        return None
    w1h = usage.cache_write_1h_tokens or 0
    counts: dict[str, int] = {"input_tokens": inp, "output_tokens": out}
    if usage.cache_read_tokens:
        counts["cache_read_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        counts["cache_write_tokens"] = usage.cache_write_tokens
        if w1h:
            counts["cache_write_1h_tokens"] = w1h
    try:
        found = _find(model, provider)
        if found is None:
            return None  # a model (or provider) it does not list
        snapshot, prov, entry = found
        now = datetime.now(tz=timezone.utc)
        mp = entry.get_prices(now)
        rates = _rates(gp, prov, entry, mp, now)
        if rates is not None:  # text tokens only: the same sum as calc_price, without its ~0.5 ms (price_terms.py)
            total = token_total(rates, inp, out, usage.cache_read_tokens or 0, usage.cache_write_tokens or 0,
                                w1h if usage.cache_write_tokens else 0)
        else:
            total = entry.calc_price(gp.Usage(**counts), prov, genai_request_timestamp=now).total_price
    except Exception as exc:  # a bad entry or an unpriced kind of token: fall back, say so once
        health.count("price_lookup", message=f"genai-prices could not price {model!r}: {type(exc).__name__}: {exc}")
        return None
    write_5m = _per_token(mp, "cache_write_mtok")
    write_1h = _per_token(mp, "cache_write_1h_mtok") or write_5m
    version = f"genai-prices {gp.__version__}"
    if snapshot.from_auto_update:
        version = f"{version} (updated {snapshot.timestamp.isoformat()})"
    return PassPrice(
        cost=float(total),
        source="genai-prices",
        version=version,
        model=f"{prov.id}/{entry.id}",
        cache_read=_usd(usage.cache_read_tokens, _per_token(mp, "cache_read_mtok")),
        cache_write_5m=_usd((usage.cache_write_tokens or 0) - w1h, write_5m),
        cache_write_1h=_usd(w1h, write_1h),
    )


_PROBE = {"input_tokens": 10_000, "output_tokens": 700, "cache_read_tokens": 3_000, "cache_write_tokens": 2_000,
          "cache_write_1h_tokens": 500}  # every kind of token a pass reports, below every tier


def _rates(gp: Any, prov: Any, entry: Any, mp: Any, now: datetime) -> dict[str, Any] | None:
    """The model price's token rates when its price is their plain sum (checked once against calc_price on a
    probe of every kind of token), else None: that model price stays on calc_price."""
    memo = _state.rates
    known = memo.get(id(mp))
    if known is not None and known[0] is mp:
        return known[1]
    rates = token_rates(mp)
    if rates is not None:
        want = entry.calc_price(gp.Usage(**_PROBE), prov, genai_request_timestamp=now).total_price
        got = token_total(rates, *(_PROBE[k] for k in _PROBE))
        if abs(float(got) - float(want)) > 1e-12 * max(1.0, abs(float(want))):  # the sums' order aside
            health.count("price_terms", message=f"genai-prices' {entry.id!r} is not the sum of its token rates")
            rates = None
    if len(memo) >= _MAX_FOUND:
        memo.clear()
    memo[id(mp)] = (mp, rates)
    return rates


# ── the price table (the user's file > genai-prices > the bundled prices.json) and the cost of a pass ─────
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


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceTable:
    """The bundled table overlaid with ``path`` (or ``$LLMTRACE_PRICES``); becomes the table in use."""
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
    with _state.table_lock:
        _state.table, _state.user_table = table, user_table
    return table


def price_table() -> PriceTable:
    t = _state.table
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
    user = _state.user_table
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

    def clear(self) -> None:
        with self._lock:
            self._costs.clear()

    def get(self, trace_id: str) -> float:
        with self._lock:
            return self._costs.get(trace_id, 0.0)


@dataclass(slots=True)
class PriceState:
    """The price tables in use and what pricing remembers, held by the process's ``runtime``
    (tracer/record/runtime.py); ``clear()`` forgets them: the tables are read again on the next priced pass."""

    gp: Any = None  # genai_prices once loaded; False when it is not installed
    load_lock: threading.Lock = field(default_factory=threading.Lock)
    # (snapshot id, model, provider) -> genai-prices' match (see _find)
    found: dict[tuple[int, str, str | None], tuple[Any, Any, Any] | None] = field(default_factory=dict)
    # id(model price) -> (the model price, its token rates or None: see _rates)
    rates: dict[int, tuple[Any, dict[str, Any] | None]] = field(default_factory=dict)
    table_lock: threading.Lock = field(default_factory=threading.Lock)
    table: PriceTable | None = None
    user_table: PriceTable | None = None  # only the user's own entries: they win over genai-prices
    trace_costs: TraceCosts = field(default_factory=TraceCosts)

    def clear(self) -> None:
        with self.table_lock:
            self.table = self.user_table = None
        self.found.clear()
        self.rates.clear()
        self.trace_costs.clear()


_state = runtime.attach("prices", PriceState())
trace_costs = _state.trace_costs


def current_deploy() -> str | None:
    """The deploy given to ``llmtrace.init`` (also on every span as the ``service.version`` resource)."""
    from llmtrace.tracer.record.lifecycle import current_settings

    s = current_settings()
    return s.deploy if s is not None else None


def accounting_values(
    model: str | None, usage: Usage, fallback_model: str | None = None, provider: str | None = None
) -> dict[str, object]:
    """Boundary values of ``meters.cache_accounting`` for one pass."""
    return cache_accounting(usage, price_pass(model, usage, fallback_model, provider), current_deploy())


def cache_accounting(usage: Usage, price: PassPrice, deploy: str | None) -> dict[str, object]:
    """``meters.cache_accounting``'s values from a pass's usage and its price: the middleware's, and
    ``llmtrace collect``'s for a foreign pass (tracer/collect/otlp_cost.py)."""
    return {
        N.METERS_CACHE_HIT_RATE: usage.hit_rate,
        N.METERS_CACHED_TOKENS: usage.cache_read_tokens,
        N.METERS_UNCACHED_TOKENS: usage.uncached_tokens,
        **price.values(),
        N.SERVICE_VERSION: deploy,
        N.METERS_USAGE_CONSISTENT: usage.consistent,
    }
