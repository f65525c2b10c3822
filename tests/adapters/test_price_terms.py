"""genai-prices' price of a pass's tokens summed from the model price's token rates (tracer/record/price_terms.py)
is the price ``calc_price`` computes, for every model price genai-prices ships whose priced kinds are text
tokens, at counts below and above their tiers; any other model price stays on ``calc_price``."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

genai_prices = pytest.importorskip("genai_prices")

from genai_prices.types import ModelPrice  # noqa: E402

from llmtrace.tracer.record import prices  # noqa: E402
from llmtrace.tracer.record.price_terms import token_rates, token_total  # noqa: E402
from llmtrace.tracer.record.usage import from_anthropic, from_openai  # noqa: E402

NOW = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)
# (input, output, cache read, cache write, of them 1-hour): plain, cached, written, 1-hour writes, past 200k
USAGES = [(1000, 50, 0, 0, 0), (1000, 50, 400, 0, 0), (1000, 50, 400, 100, 40), (250_000, 900, 100_000, 20_000, 5_000)]


def _calc(entry: object, provider: object, usage: tuple[int, int, int, int, int]) -> Decimal:
    inp, out, read, write, w1h = usage
    counts = {"input_tokens": inp, "output_tokens": out}
    counts.update({k: v for k, v in (("cache_read_tokens", read), ("cache_write_tokens", write),
                                     ("cache_write_1h_tokens", w1h)) if v})
    return entry.calc_price(genai_prices.Usage(**counts), provider, genai_request_timestamp=NOW).total_price  # type: ignore[attr-defined]


def test_the_sum_of_token_rates_is_calc_price_for_every_token_model() -> None:
    snapshot = genai_prices.data_snapshot.get_snapshot()
    compared, other = 0, 0
    for provider in snapshot.providers:
        for entry in provider.models:
            rates = token_rates(entry.get_prices(NOW))
            if rates is None:
                other += 1
                continue
            for usage in USAGES:
                try:
                    want = _calc(entry, provider, usage)
                except Exception:  # counts that model price refuses (calc_price validates); so does ours then
                    continue
                assert float(token_total(rates, *usage)) == pytest.approx(float(want), rel=1e-12, abs=1e-15), (
                    provider.id, entry.id, usage)
                compared += 1
    assert compared > 5000 and other > 0  # most of genai-prices' models, and some that are not token-only


def test_a_price_for_anything_but_tokens_is_left_to_calc_price() -> None:
    assert token_rates(ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2))) is not None
    assert token_rates(ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2), requests_kcount=Decimal(5))) is None
    assert token_rates(ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2), input_audio_mtok=Decimal(3))) is None


@pytest.mark.parametrize(("model", "provider", "usage"), [
    ("gpt-4o-mini", "openai", from_openai({"prompt_tokens": 1000, "completion_tokens": 50,
                                            "prompt_tokens_details": {"cached_tokens": 400}})),
    ("claude-sonnet-4-5", "anthropic", from_anthropic({"input_tokens": 100, "output_tokens": 50,
                                                        "cache_read_input_tokens": 800,
                                                        "cache_creation_input_tokens": 100})),
])
def test_price_pass_charges_what_calc_price_charges(model: str, provider: str, usage: object) -> None:
    got = prices.price_pass(model, usage, None, provider)  # type: ignore[arg-type]
    snapshot = genai_prices.data_snapshot.get_snapshot()
    prov, entry = snapshot.find_provider_model(model, None, provider, None)
    u = usage  # the counts from_genai_prices hands calc_price
    want = _calc(entry, prov, (u.input_tokens, u.output_tokens, u.cache_read_tokens or 0,  # type: ignore[attr-defined]
                               u.cache_write_tokens or 0, 0))  # type: ignore[attr-defined]
    assert got.source == "genai-prices" and got.cost == pytest.approx(float(want), rel=1e-12)
