"""Spans from other instrumentations, sent through the stock OTLP exporter, mapped onto the stage model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from collector_helpers import otlp_provider, query, start_collector
from opentelemetry.trace import SpanKind

from llmtrace.tracer.record import capture

T0 = 1_780_000_000_000_000_000  # fixed start so the synthesized stage times can be checked exactly


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("mapping")
    col = start_collector(tmp)
    try:
        tp = otlp_provider(col.endpoint, "fleet")
        t = tp.get_tracer("other-instrumentations")
        # OpenTelemetry GenAI semconv v1.41
        s = t.start_span("chat gpt-4o", kind=SpanKind.CLIENT, start_time=T0, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.usage.input_tokens": 1000,
            "gen_ai.usage.output_tokens": 11, "gen_ai.usage.cache_read.input_tokens": 800,
            "gen_ai.response.finish_reasons": ["stop"], "gen_ai.request.temperature": 0.2,
            "gen_ai.response.time_to_first_chunk": 0.25, "gen_ai.input.messages": '[{"role":"user","parts":'
            '[{"type":"text","content":"my secret plan"}]}]', "mark": "genai-new"})
        s.end(end_time=T0 + 1_250_000_000)  # 1.25 s: 0.25 s to first chunk, then 10 more tokens in 1 s
        # the older GenAI names (gen_ai.system, prompt_tokens / completion_tokens), as OpenLLMetry writes them
        s = t.start_span("openai.chat", kind=SpanKind.CLIENT, start_time=T0, attributes={
            "gen_ai.system": "openai", "llm.request.type": "chat", "gen_ai.request.model": "gpt-3.5-turbo",
            "gen_ai.usage.prompt_tokens": 50, "gen_ai.usage.completion_tokens": 7,
            "gen_ai.prompt.0.content": "hello there", "gen_ai.prompt.0.role": "user", "mark": "genai-old"})
        s.end(end_time=T0 + 500_000_000)
        # OpenInference: an LLM span under a CHAIN, and a TOOL span
        with t.start_as_current_span("agent", attributes={"openinference.span.kind": "CHAIN", "mark": "oi-chain"}):
            s = t.start_span("ChatOpenAI", attributes={
                "openinference.span.kind": "LLM", "llm.model_name": "claude-sonnet", "llm.provider": "anthropic",
                "llm.token_count.prompt": 400, "llm.token_count.completion": 20, "llm.token_count.total": 420,
                "llm.token_count.prompt_details.cache_read": 100,
                "llm.invocation_parameters": json.dumps({"temperature": 0.7, "max_tokens": 256, "seed": 5}),
                "input.value": "what is in my cart?", "output.value": "two apples",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "what is in my cart?", "mark": "oi-llm"})
            s.end()
            s = t.start_span("get_cart", attributes={"openinference.span.kind": "TOOL", "tool.name": "get_cart",
                                                     "mark": "oi-tool"})
            s.end()
        # vLLM's request span: arrival, 0.1 s queued, 0.2 s prefill, 0.9 s decode (10 tokens)
        s = t.start_span("llm_request", kind=SpanKind.SERVER, start_time=T0, attributes={
            "gen_ai.response.model": "meta-llama/Llama-3.1-8B", "gen_ai.request.id": "cmpl-1",
            "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 10,
            "gen_ai.request.max_tokens": 64, "gen_ai.request.temperature": 0.0, "gen_ai.request.top_p": 1.0,
            "gen_ai.latency.time_in_queue": 0.1, "gen_ai.latency.time_to_first_token": 0.3,
            "gen_ai.latency.time_in_model_prefill": 0.2, "gen_ai.latency.time_in_model_decode": 0.9,
            "gen_ai.latency.e2e": 1.2, "mark": "vllm"})
        s.end(end_time=T0 + 1_200_000_000)
        tp.shutdown()
        col.wait_written(9)  # 6 spans + 3 synthesized vLLM stage rows
    finally:
        assert col.stop() == 0
    return col.db


def _req(db: Path, mark: str) -> dict[str, object]:
    cols = ["operation", "model", "response_model", "provider", "side", "prompt_tokens", "cached_tokens",
            "output_tokens", "ttft_ms", "tpot_ms", "finish_reason", "temperature", "top_p", "seed", "max_tokens",
            "queue_wait_ms", "prompt_hash", "output_hash", "attributes"]
    rows = query(db, f"SELECT {', '.join(cols)} FROM requests WHERE attributes->>'mark' = ?", [mark])
    assert len(rows) == 1, rows
    out = dict(zip(cols, rows[0]))
    out["attributes"] = json.loads(out["attributes"])  # type: ignore[arg-type]
    return out


def test_genai_v141(collected: Path) -> None:
    r = _req(collected, "genai-new")
    assert (r["operation"], r["model"], r["provider"], r["side"]) == ("chat", "gpt-4o", "openai", "client")
    assert (r["prompt_tokens"], r["cached_tokens"], r["output_tokens"], r["finish_reason"]) == (1000, 800, 11, "stop")
    assert r["ttft_ms"] == pytest.approx(250.0) and r["tpot_ms"] == pytest.approx(100.0)
    a = r["attributes"]
    # raw attributes kept; message text replaced by its hash under the default capture mode (hashes)
    assert a["gen_ai.response.time_to_first_chunk"] == 0.25 and a["llmtrace.mapped_from"] == "genai"
    assert "gen_ai.input.messages" not in a and len(a["gen_ai.input.messages.hash"]) == 16
    assert "my secret plan" not in json.dumps(a)
    # the prompt hash is over the message segments, as on llmtrace's own pass spans
    segs = json.loads(a["llmtrace.prompt.segments"])
    assert [(s["kind"], s["chars"]) for s in segs] == [("user", len("my secret plan"))]
    assert r["prompt_hash"] == a["llmtrace.prompt.hash"] != a["gen_ai.input.messages.hash"]


def test_genai_legacy_names(collected: Path) -> None:
    r = _req(collected, "genai-old")
    assert (r["operation"], r["model"], r["provider"]) == ("chat", "gpt-3.5-turbo", "openai")
    assert (r["prompt_tokens"], r["output_tokens"]) == (50, 7)
    a = r["attributes"]
    assert a["gen_ai.system"] == "openai" and a["gen_ai.usage.prompt_tokens"] == 50
    assert a["llmtrace.mapped_from"] == "genai-legacy" and "gen_ai.prompt.0.content" not in a


def test_openinference(collected: Path) -> None:
    r = _req(collected, "oi-llm")
    assert (r["operation"], r["model"], r["provider"], r["side"]) == ("chat", "claude-sonnet", "anthropic", "client")
    assert (r["prompt_tokens"], r["output_tokens"], r["cached_tokens"]) == (400, 20, 100)
    assert (r["temperature"], r["max_tokens"], r["seed"]) == (0.7, 256, 5)
    assert r["prompt_hash"] and r["output_hash"] and "two apples" not in json.dumps(r["attributes"])
    assert r["attributes"]["llm.token_count.total"] == 420
    (tool,) = query(collected, "SELECT operation, stage, phase, attributes->>'gen_ai.tool.name' FROM spans "
                               "WHERE attributes->>'mark' = 'oi-tool'")
    assert tool == ("execute_tool", "loop.tool_dispatch", "loops", "get_cart")
    (chain,) = query(collected, "SELECT operation, stage FROM spans WHERE attributes->>'mark' = 'oi-chain'")
    assert chain == (None, None)


def test_vllm_request_span(collected: Path) -> None:
    r = _req(collected, "vllm")
    assert (r["model"], r["response_model"], r["provider"], r["side"]) == (
        "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "vllm", "server")
    assert (r["prompt_tokens"], r["output_tokens"], r["max_tokens"], r["temperature"]) == (300, 10, 64, 0.0)
    assert r["ttft_ms"] == pytest.approx(300.0) and r["queue_wait_ms"] == pytest.approx(100.0)
    assert r["tpot_ms"] == pytest.approx(100.0)
    stages = query(collected, """
        SELECT s.stage, s.phase, s.start_ns - ?, s.end_ns - ?, s.attributes FROM stages s
        JOIN requests r ON s.parent_span_id = r.span_id AND s.trace_id = r.trace_id
        WHERE r.attributes->>'mark' = 'vllm' ORDER BY s.stage_number""", [T0, T0])
    assert [(s[0], s[1], s[2], s[3]) for s in stages] == [
        ("arrival.admission", "arrival", 0, 100_000_000),
        ("forward.prefill", "forward", 100_000_000, 300_000_000),
        ("forward.decode", "forward", 300_000_000, 1_200_000_000),
    ]
    adm, pre, dec = (json.loads(s[4]) for s in stages)
    assert adm["llmtrace.observed"] is True and adm["llmtrace.admission.queue_wait_ms"] == pytest.approx(100.0)
    assert pre["llmtrace.prefill.ms"] == pytest.approx(200.0)
    assert dec["llmtrace.decode.steps"] == 9 and dec["llmtrace.decode.ms"] == pytest.approx(900.0)


def test_capture_full_keeps_scrubbed_text(tmp_path: Path) -> None:
    col = start_collector(tmp_path, "--capture", "full")
    try:
        tp = otlp_provider(col.endpoint, "fleet")
        s = tp.get_tracer("t").start_span("LLM", attributes={
            "openinference.span.kind": "LLM", "llm.model_name": "m",
            "input.value": "use key sk-abcdefghijklmnopqrstuvwx please"})
        s.end()
        tp.shutdown()
        col.wait_written(1)
    finally:
        col.stop()
    (a,) = query(col.db, "SELECT attributes->>'input.value' FROM spans")[0]
    assert capture.REDACTED_MARKER.sub("[REDACTED]", a) == "use key [REDACTED] please"
