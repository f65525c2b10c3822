"""Names normalised once (tracer/collect/otlp_names.py): every spelling of time to first token lands in the
``ttft_ms`` column, and every usage block's cache convention gives the same prompt, cached and uncached
tokens and hit rate. Spans go through the stock OTLP/HTTP exporter into a real `llmtrace collect`.

Sources of the spellings: OTel GenAI semconv v1.41 (gen_ai.response.time_to_first_chunk; the
gen_ai.client.operation.time_to_first_chunk and gen_ai.server.time_to_first_token metric names, which some
SDKs set as span attributes), vLLM/SGLang (gen_ai.latency.time_to_first_token), Dynamo PR 9543 (ttft_ms),
llm-d's P/D sidecar (llm_d.pd_proxy.true_ttft_ms), Langfuse (completionStartTime, over OTel
langfuse.observation.completion_start_time), OpenInference's "First Token Stream Event". Cache conventions:
OTel GenAI (cached inside input_tokens), MLflow (mlflow/tracing/constant.py SpanAttributeKey.CHAT_USAGE =
mlflow.chat.tokenUsage, input_tokens uncached; MLflow issue 24759), Bedrock Converse usage (inputTokens,
cacheReadInputTokens, cacheWriteInputTokens), Anthropic Messages usage (input_tokens beside
cache_read_input_tokens and cache_creation_input_tokens), Strands Agents (strands/telemetry/tracer.py:
Bedrock's inputTokens as gen_ai.usage.input_tokens, gen_ai.usage.cache_write_input_tokens).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from collector_helpers import otlp_provider, query, start_collector
from opentelemetry.trace import SpanKind

T0 = 1_780_000_000_000_000_000
MS = 1_000_000
SPAN_MS = 2000  # every span lasts 2 s

# (spelling, value as sent, TTFT in ms it means)
TTFT_CASES: list[tuple[str, object, float]] = [
    ("gen_ai.response.time_to_first_chunk", 0.25, 250.0),
    ("gen_ai.client.operation.time_to_first_chunk", 0.3, 300.0),
    ("gen_ai.server.time_to_first_token", 0.35, 350.0),
    ("gen_ai.response.time_to_first_token", 0.4, 400.0),
    ("gen_ai.latency.time_to_first_token", 0.45, 450.0),  # seconds (V0, SGLang)
    ("gen_ai.latency.time_to_first_token", 500_000_000, 500.0),  # nanoseconds (V1), the same name
    ("ttft_ms", 550.0, 550.0),
    ("llm_d.pd_proxy.true_ttft_ms", 600.0, 600.0),
    ("gen_ai.ttft", 0.65, 650.0),  # seconds
    ("gen_ai.ttft", 700, 700.0),  # milliseconds: 700 s cannot fit a 2 s span
    ("langfuse.observation.completion_start_time",
     dt.datetime.fromtimestamp((T0 + 750 * MS) / 1e9, dt.timezone.utc).isoformat(), 750.0),
    ("completionStartTime", (T0 + 800 * MS) // MS, 800.0),  # epoch milliseconds
]

# (mark, attributes): each one call of 1000 prompt tokens, 800 of them read from cache, 100 written
USAGE_CASES: dict[str, dict[str, object]] = {
    "otel-included": {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                      "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 800,
                      "gen_ai.usage.output_tokens": 5},
    "mlflow-excluded": {"mlflow.spanType": "CHAT_MODEL", "mlflow.chat.tokenUsage": json.dumps(
        {"input_tokens": 200, "output_tokens": 5, "total_tokens": 205, "cache_read_input_tokens": 800})},
    "bedrock-excluded-both": {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "aws.bedrock",
                              "gen_ai.request.model": "claude", "gen_ai.usage": json.dumps(
        {"inputTokens": 100, "outputTokens": 5, "totalTokens": 1005, "cacheReadInputTokens": 800,
         "cacheWriteInputTokens": 100})},
    "anthropic-excluded-both": {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
                                "gen_ai.request.model": "claude", "llm.usage": json.dumps(
        {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 800,
         "cache_creation_input_tokens": 100})},
    "strands-excluded-both": {"gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents",
                              "gen_ai.request.model": "claude", "gen_ai.usage.input_tokens": 100,
                              "gen_ai.usage.output_tokens": 5, "gen_ai.usage.cache_read_input_tokens": 800,
                              "gen_ai.usage.cache_write_input_tokens": 100},
}
CONVENTION = {"otel-included": "included", "mlflow-excluded": "excluded"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("conventions")
    col = start_collector(tmp)
    try:
        tp = otlp_provider(col.endpoint, "fleet")
        t = tp.get_tracer("many-tools")
        for i, (key, value, _) in enumerate(TTFT_CASES):
            s = t.start_span("chat m", kind=SpanKind.CLIENT, start_time=T0, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", key: value, "mark": f"ttft-{i}"})
            s.end(end_time=T0 + SPAN_MS * MS)
        # OpenInference's first-token event, 850 ms in
        s = t.start_span("ChatOpenAI", start_time=T0, attributes={
            "openinference.span.kind": "LLM", "llm.model_name": "m", "mark": "ttft-event"})
        s.add_event("First Token Stream Event", timestamp=T0 + 850 * MS)
        s.end(end_time=T0 + SPAN_MS * MS)
        for mark, attrs in USAGE_CASES.items():
            s = t.start_span("chat claude", kind=SpanKind.CLIENT, start_time=T0, attributes={**attrs, "mark": mark})
            s.end(end_time=T0 + SPAN_MS * MS)
        tp.shutdown()
        col.wait_written(len(TTFT_CASES) + 1 + len(USAGE_CASES))
    finally:
        assert col.stop() == 0
    return col.db


@pytest.mark.parametrize("i", range(len(TTFT_CASES)), ids=[f"{k}={v!r}" for k, v, _ in TTFT_CASES])
def test_every_ttft_spelling_lands_in_one_column(store: Path, i: int) -> None:
    key, _, want = TTFT_CASES[i]
    rows = query(store, "SELECT ttft_ms, attributes->>'llmtrace.ttft.source' FROM passes p JOIN spans s "
                        "ON s.span_id = p.span_id WHERE s.attributes->>'mark' = ?", [f"ttft-{i}"])
    assert len(rows) == 1
    ttft, source = rows[0]
    assert ttft == pytest.approx(want, abs=0.01)
    assert str(source).startswith(key + "/")


def test_openinference_first_token_event(store: Path) -> None:
    rows = query(store, "SELECT ttft_ms FROM requests WHERE attributes->>'mark' = 'ttft-event'")
    assert rows == [(pytest.approx(850.0),)]


@pytest.mark.parametrize("mark", list(USAGE_CASES))
def test_cache_conventions_agree(store: Path, mark: str) -> None:
    rows = query(store, "SELECT p.prompt_tokens, p.cached_tokens, p.prompt_tokens - p.cached_tokens, p.hit_ratio, "
                        "r.hit_ratio, s.attributes->>'llmtrace.usage.cache_convention' FROM passes p "
                        "JOIN requests r ON r.span_id = p.span_id JOIN spans s ON s.span_id = p.span_id "
                        "WHERE s.attributes->>'mark' = ?", [mark])
    assert len(rows) == 1, rows
    prompt, cached, uncached, hit, request_hit, convention = rows[0]
    assert convention == CONVENTION.get(mark, "excluded_both")
    # included: 1000 as sent; excluded (MLflow): 200 uncached + 800 read; excluded_both: 100 + 800 read +
    # 100 written (a written token was computed: uncached)
    assert (prompt, cached, uncached) == (1000, 800, 200)
    assert hit == pytest.approx(0.8) and request_hit == pytest.approx(0.8)
