"""genai-prices' price of a pass's tokens, from the matched model price's per-token rates.

``calc_price`` walks genai-prices' unit registry, decomposes the usage into leaf counts and validates them:
0.2-0.6 ms a call, paid on every priced pass (the middleware's and, through ``llmtrace collect``, every foreign
client pass). Where a model price prices text tokens only (input, output, cache reads, 5-minute and 1-hour
cache writes; a search price applies to counts no pass reports), its total is a sum of rate times count, each
rate its tier's (a cliff: the highest tier whose start the prompt's input tokens pass, as ``calc_unit_price``
chooses): :func:`token_total` sums it in a few microseconds. ``prices.from_genai_prices`` checks it against
``calc_price`` on a probe the first time each model price is used, and keeps a price that disagrees on
``calc_price``; tests/adapters/test_price_terms.py checks it against every such model price genai-prices ships.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

_TOKEN_KEYS = frozenset({"input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_1h_mtok"})
_UNCOUNTED = frozenset({"web_searches_kcount", "storage_searches_kcount"})  # counts a pass's usage never has
_MILLION = Decimal(1_000_000)


def token_rates(model_price: Any) -> dict[str, Any] | None:
    """The model price's token rates (a Decimal or a TieredPrices each, per million tokens), or None when it
    prices anything else a pass could be charged for (audio, images, requests, ...): that one is calc_price's."""
    items = {k: v for k, v in vars(model_price).items() if not k.startswith("_") and v is not None}
    if "input_mtok" not in items or "output_mtok" not in items or not _TOKEN_KEYS | _UNCOUNTED >= items.keys():
        return None
    return {k: v for k, v in items.items() if k in _TOKEN_KEYS}


def _rate(price: Any, total_input: int) -> Decimal:
    if isinstance(price, Decimal):
        return price
    for tier in reversed(price.tiers):  # TieredPrices, tiers in ascending order of start
        if total_input > tier.start:
            return Decimal(tier.price)
    return Decimal(price.base)


def token_total(rates: Mapping[str, Any], input_tokens: int, output_tokens: int, cache_read: int,
                cache_write: int, cache_write_1h: int) -> Decimal:
    """USD for the counts (``cache_write`` includes the 1-hour writes); a kind without a rate of its own is
    charged its parent's (a cache read or write as input, a 1-hour write as a write)."""
    r_in = _rate(rates["input_mtok"], input_tokens)
    r_read = _rate(rates["cache_read_mtok"], input_tokens) if "cache_read_mtok" in rates else r_in
    r_write = _rate(rates["cache_write_mtok"], input_tokens) if "cache_write_mtok" in rates else r_in
    r_1h = _rate(rates["cache_write_1h_mtok"], input_tokens) if "cache_write_1h_mtok" in rates else r_write
    r_out = _rate(rates["output_mtok"], input_tokens)
    terms = ((input_tokens - cache_read - cache_write, r_in), (cache_read, r_read),
             (cache_write - cache_write_1h, r_write), (cache_write_1h, r_1h), (output_tokens, r_out))
    return sum((rate * count / _MILLION for count, rate in terms), Decimal(0))
