"""Pricing one pass from a maintained price database, with the bundled table as the fallback.

Order: the user's own file (``LLMTRACE_PRICES`` / ``meters.load_prices(path)``) for the models it names;
then pydantic's ``genai-prices`` (the optional ``prices`` extra: 800+ models with cache read and 5-minute
and 1-hour cache write prices, tiers and price changes over time); then the bundled ``prices.json``. A
model none of them knows gets no cost. Every priced pass says which source and which version priced it,
and what its cache reads and its 5-minute and 1-hour cache writes cost on their own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from llmtrace.tracer import health
from llmtrace.tracer.registry import names as N

from .usage import Usage

_gp: Any = None  # genai_prices once loaded; False when it is not installed
_load_lock = threading.Lock()


def _lib() -> Any:
    """genai-prices, imported on first use (it brings pydantic: ~0.4 s, not to be paid by every import of
    the middleware); None when it is not installed."""
    global _gp
    if _gp is None:
        with _load_lock:
            if _gp is None:
                try:  # optional: data plus pydantic; without it the bundled table prices the common models
                    import genai_prices

                    genai_prices.data_snapshot.get_snapshot()  # parse the bundled data now, once
                    _gp = genai_prices
                except ImportError:
                    _gp = False
    return _gp or None


def warm_up() -> None:
    """Load genai-prices in the background so the first priced pass does not wait for it."""
    if _gp is None:
        threading.Thread(target=_lib, name="llmtrace-prices", daemon=True).start()


_found: dict[tuple[int, str, str | None], tuple[Any, Any, Any] | None] = {}
_MAX_FOUND = 4096


def _find(model: str, provider: str | None) -> tuple[Any, Any, Any] | None:
    """(snapshot, provider, model entry) for a name, remembered: matching a name against 800+ models costs
    ~60 us, pricing the match ~10 us. The price itself is still chosen by date at every call."""
    snapshot = _gp.data_snapshot.get_snapshot()
    key = (id(snapshot), model, provider)
    if key in _found:
        return _found[key]
    try:
        prov, entry = snapshot.find_provider_model(model, None, provider, None)
        hit: tuple[Any, Any, Any] | None = (snapshot, prov, entry)
    except LookupError:
        hit = None
    if len(_found) >= _MAX_FOUND:
        _found.clear()
    _found[key] = hit
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
    v = getattr(model_price, key, None)
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
        calc = entry.calc_price(
            gp.Usage(**counts),
            prov,
            genai_request_timestamp=datetime.now(tz=timezone.utc),
            auto_update_timestamp=snapshot.timestamp if snapshot.from_auto_update else None,
        )
    except Exception as exc:  # a bad entry or an unpriced kind of token: fall back, say so once
        health.count("price_lookup", message=f"genai-prices could not price {model!r}: {type(exc).__name__}: {exc}")
        return None
    mp = calc.model_price
    write_5m = _per_token(mp, "cache_write_mtok")
    write_1h = _per_token(mp, "cache_write_1h_mtok") or write_5m
    version = f"genai-prices {gp.__version__}"
    if calc.auto_update_timestamp is not None:
        version = f"{version} (updated {calc.auto_update_timestamp.isoformat()})"
    return PassPrice(
        cost=float(calc.total_price),
        source="genai-prices",
        version=version,
        model=f"{calc.provider.id}/{calc.model.id}",
        cache_read=_usd(usage.cache_read_tokens, _per_token(mp, "cache_read_mtok")),
        cache_write_5m=_usd((usage.cache_write_tokens or 0) - w1h, write_5m),
        cache_write_1h=_usd(w1h, write_1h),
    )
