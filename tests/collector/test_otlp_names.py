"""The unit rules of tracer/collect/otlp_names.py at their edges (the end-to-end runs through `collect` are in
test_collector_conventions.py and test_collector_engines.py)."""

from __future__ import annotations

import json

import pytest

from llmtrace.tracer.collect.otlp_names import seconds_scale, ttft_ms, usage_block

T0 = 1_780_000_000_000_000_000


@pytest.mark.parametrize(("values", "span_s", "unit"), [
    ([0.3, 1.2], 1.2, "s"),  # vLLM V0 / SGLang: seconds inside a 1.2 s span
    ([3e8, 1.2e9], 1.2, "ns"),  # vLLM V1: the same names in nanoseconds
    ([300.0, 1200.0], 1.2, "ms"),
    ([1.2], 1.2, "s"),  # the whole span, exactly
    ([0.0], 1.2, "s"),  # nothing waited: any unit reads 0, seconds it is
    ([4e8], 0.0, "ns"),  # a span with no length: past a million is nanoseconds
    ([0.4], 0.0, "s"),
])
def test_seconds_scale(values: list[float], span_s: float, unit: str) -> None:
    assert seconds_scale(values, span_s)[1] == unit


def test_ttft_first_spelling_wins_and_bad_values_fall_through() -> None:
    raw = {"gen_ai.response.time_to_first_chunk": "not a number", "ttft_ms": 120.0, "gen_ai.ttft": 9.0}
    assert ttft_ms(raw, T0, T0 + 2 * 10**9) == (pytest.approx(120.0), "ttft_ms/ms")
    assert ttft_ms({"gen_ai.response.time_to_first_chunk": -1.0}, T0, T0 + 10**9) is None
    assert ttft_ms({"other": 1}, T0, T0 + 10**9) is None


def test_completion_start_outside_the_span_is_no_ttft() -> None:
    before = "2020-01-01T00:00:00Z"  # ahead of the span: a clock of another machine, not a first token
    assert ttft_ms({"completionStartTime": before}, T0, T0 + 10**9) is None
    assert ttft_ms({"completionStartTime": (T0 + 3 * 10**9) // 10**6}, T0, T0 + 10**9) is None


def test_usage_objects_by_their_fields() -> None:
    bedrock = usage_block({"usage": json.dumps({"inputTokens": 10, "outputTokens": 2, "cacheReadInputTokens": 90,
                                                "cacheWriteInputTokens": 5})})
    assert bedrock is not None and (bedrock.convention, bedrock.input_tokens, bedrock.cache_read,
                                    bedrock.cache_write) == ("excluded_both", 10, 90, 5)
    openai = usage_block({"usage": json.dumps({"prompt_tokens": 100, "completion_tokens": 3,
                                               "prompt_tokens_details": {"cached_tokens": 64}})})
    assert openai is not None and (openai.convention, openai.input_tokens, openai.cache_read) == ("included", 100, 64)
    assert usage_block({"usage": "[1, 2]"}) is None and usage_block({"usage": "{not json"}) is None
