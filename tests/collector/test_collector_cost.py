"""Foreign passes carry a cost (issue 37): ``llmtrace collect`` prices a client pass span from another tool with
the middleware's own price lookup (tracer/record/prices.py), reading its usage block with the cache convention
it follows, so ``cost_usd`` and ``hit_ratio`` agree whichever tool produced the span.

Spans go through the stock OTLP/HTTP exporter into a real ``llmtrace collect``. Shapes and their sources: OTel
GenAI semconv v1.41 (flat ``gen_ai.usage.*``, cached inside ``input_tokens``), MLflow
(mlflow/tracing/constant.py ``mlflow.chat.tokenUsage``: ``input_tokens`` uncached, reads beside), Anthropic's
Messages usage copied onto a span (``input_tokens`` beside ``cache_read_input_tokens`` and
``cache_creation_input_tokens``), Bedrock Converse's usage (``inputTokens``, ``cacheReadInputTokens``,
``cacheWriteInputTokens``) and Strands Agents (strands/telemetry/tracer.py: Bedrock's ``inputTokens`` as
``gen_ai.usage.input_tokens``, ``gen_ai.usage.cache_write_input_tokens``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import openai
import pytest
from collector_helpers import otlp_provider, query, start_collector
from opentelemetry.trace import SpanKind

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.tracer.record import prices
from llmtrace.tracer.record import usage as usage_mod
from llmtrace.tracer.record.runtime import runtime

T0 = 1_780_000_000_000_000_000
MS = 1_000_000

# USD per million tokens of a model only the user's price file knows: the costs below are exact
OWN_PRICES = {"acme-1": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "output": 4.0}}
# 1000 prompt tokens, 800 read from cache (and, where the shape has writes, 100 written), 50 out
READ_ONLY = 200 * 1.0 + 800 * 0.1 + 50 * 4.0  # = 480 micro-USD
WITH_WRITES = 100 * 1.0 + 800 * 0.1 + 100 * 1.25 + 50 * 4.0  # = 505 micro-USD

OPENAI_USAGE = {"prompt_tokens": 1000, "completion_tokens": 50, "prompt_tokens_details": {"cached_tokens": 800}}
ANTHROPIC_USAGE = {"input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": 800,
                   "cache_creation_input_tokens": 100}


def _otel(model: str) -> dict[str, object]:
    return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 800,
            "gen_ai.usage.output_tokens": 50}


def _mlflow(model: str) -> dict[str, object]:
    return {"mlflow.spanType": "CHAT_MODEL", "mlflow.llm.model": model, "mlflow.chat.tokenUsage": json.dumps(
        {"input_tokens": 200, "output_tokens": 50, "total_tokens": 250, "cache_read_input_tokens": 800})}


def _anthropic(model: str) -> dict[str, object]:
    return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic", "gen_ai.request.model": model,
            "llm.usage": json.dumps(ANTHROPIC_USAGE)}


def _bedrock(model: str) -> dict[str, object]:
    return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "aws.bedrock", "gen_ai.request.model": model,
            "gen_ai.usage": json.dumps({"inputTokens": 100, "outputTokens": 50, "totalTokens": 1050,
                                        "cacheReadInputTokens": 800, "cacheWriteInputTokens": 100})}


def _strands(model: str) -> dict[str, object]:
    return {"gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents", "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 50,
            "gen_ai.usage.cache_read_input_tokens": 800, "gen_ai.usage.cache_write_input_tokens": 100}


# mark -> (span attributes, convention, cost in micro-USD by the user's file)
KNOWN: dict[str, tuple[dict[str, object], str, float]] = {
    "otel-included": (_otel("acme-1"), "included", READ_ONLY),
    "mlflow-excluded": (_mlflow("acme-1"), "excluded", READ_ONLY),
    "anthropic-excluded-both": (_anthropic("acme-1"), "excluded_both", WITH_WRITES),
    "bedrock-excluded-both": (_bedrock("acme-1"), "excluded_both", WITH_WRITES),
    "strands-excluded-both": (_strands("acme-1"), "excluded_both", WITH_WRITES),
}
# mark -> (span attributes, the middleware's usage for the same call, provider): priced by genai-prices
MAINTAINED: dict[str, tuple[dict[str, object], usage_mod.Usage, str, str]] = {
    "otel-gpt": (_otel("gpt-4o-mini"), usage_mod.from_openai(OPENAI_USAGE), "gpt-4o-mini", "openai"),
    "mlflow-gpt": (_mlflow("gpt-4o-mini"), usage_mod.from_openai(OPENAI_USAGE), "gpt-4o-mini", "openai"),
    "anthropic-claude": (_anthropic("claude-sonnet-4-5"), usage_mod.from_anthropic(ANTHROPIC_USAGE),
                         "claude-sonnet-4-5", "anthropic"),
}


@pytest.fixture(scope="module")
def own_prices(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("prices") / "prices.json"
    path.write_text(json.dumps(OWN_PRICES))
    prices.load_prices(path)  # the middleware's table in this process, as the collector reads it there
    yield path
    runtime.clear()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, own_prices: Path) -> Path:
    tmp = tmp_path_factory.mktemp("cost")
    col = start_collector(tmp, env={"LLMTRACE_PRICES": str(own_prices)})
    try:
        tp = otlp_provider(col.endpoint, "fleet")
        t = tp.get_tracer("many-tools")
        spans = {**{m: a for m, (a, _, _) in KNOWN.items()}, **{m: a for m, (a, *_) in MAINTAINED.items()},
                 # an engine's own pass (server side) is not priced: the call's client pass is
                 "engine": {**_otel("acme-1"), "gen_ai.operation.name": "chat"}}
        for mark, attrs in spans.items():
            kind = SpanKind.SERVER if mark == "engine" else SpanKind.CLIENT
            s = t.start_span("chat", kind=kind, start_time=T0, attributes={**attrs, "mark": mark})
            s.end(end_time=T0 + 2000 * MS)
        tp.shutdown()
        col.wait_written(len(spans))
    finally:
        assert col.stop() == 0
    return col.db


def _pass(store: Path, mark: str) -> tuple[object, ...]:
    rows = query(store, "SELECT r.cost_usd, r.hit_ratio, r.prompt_tokens, r.cached_tokens, "
                        "s.attributes->>'llmtrace.usage.cache_convention', "
                        "(SELECT c.attributes->>'llmtrace.meters.price_source' FROM spans c "
                        " WHERE c.parent_span_id = s.span_id AND c.stage = 'meters.cache_accounting') "
                        "FROM requests r JOIN spans s ON s.span_id = r.span_id WHERE s.attributes->>'mark' = ?",
                 [mark])
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.parametrize("mark", list(KNOWN))
def test_a_foreign_pass_costs_what_its_convention_says(store: Path, mark: str) -> None:
    _, convention, micro_usd = KNOWN[mark]
    cost, hit, prompt, cached, got_convention, source = _pass(store, mark)
    assert got_convention == convention and source == "user"
    assert cost == pytest.approx(micro_usd / 1e6, rel=1e-9)
    assert (prompt, cached, hit) == (1000, 800, pytest.approx(0.8))  # hit rate and cost from one reading


@pytest.mark.parametrize("mark", list(MAINTAINED))
def test_a_foreign_pass_costs_what_the_middleware_charges(store: Path, mark: str) -> None:
    _, usage, model, provider = MAINTAINED[mark]
    want = prices.price_pass(model, usage, None, provider)  # what client_stages records for this call
    assert want.cost is not None and want.source == "genai-prices"
    cost, hit, *_ , source = _pass(store, mark)
    assert source == "genai-prices" and hit == pytest.approx(0.8)
    assert cost == pytest.approx(want.cost, rel=1e-9)


def test_an_engine_pass_is_not_priced(store: Path) -> None:
    cost, *_ = _pass(store, "engine")
    assert cost is None


def _provider(answers: dict[str, dict[str, object]]) -> ThreadingHTTPServer:
    """A loopback provider that answers each path with one JSON body (OpenAI's and Anthropic's shapes)."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.dumps(answers[self.path]).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_the_collector_charges_what_the_middleware_recorded(store: Path, tmp_path: Path) -> None:
    """The same two calls made through the middleware itself (the real OpenAI and Anthropic SDKs under
    instrument()): the cost its own store records is the cost the collector gave the foreign spans of them."""
    srv = _provider({
        "/v1/chat/completions": {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": "ok"}}],
                                 "usage": {**OPENAI_USAGE, "total_tokens": 1050}},
        "/v1/messages": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                         "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                         "stop_sequence": None, "usage": ANTHROPIC_USAGE}})
    app_db = tmp_path / "app.duckdb"
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    llmtrace.init(db=app_db, service_name="app", strict=True)
    try:
        oa = instrument(openai.OpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0))
        oa.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        an = instrument(anthropic.Anthropic(api_key="sk-test", base_url=base, max_retries=0))
        an.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    finally:
        llmtrace.shutdown()
        srv.shutdown()
    own = dict(query(app_db, "SELECT model, cost_usd FROM requests"))
    assert set(own) == {"gpt-4o-mini", "claude-sonnet-4-5"} and all(own.values()), own
    for mark, model in (("otel-gpt", "gpt-4o-mini"), ("mlflow-gpt", "gpt-4o-mini"),
                        ("anthropic-claude", "claude-sonnet-4-5")):
        cost, *_ = _pass(store, mark)
        assert cost == pytest.approx(own[model], rel=1e-9), (mark, cost, own[model])
