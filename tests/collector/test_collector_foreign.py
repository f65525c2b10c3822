"""Foreign instrumentations, the real packages wrapping the real openai SDK against a loopback endpoint,
exported through the stock OTLP exporter to a real ``llmtrace collect``: model, tokens, finish reason
(normalised) and TTFT where the instrumentation has one land in the ``requests`` and ``passes`` views."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from collector_helpers import otlp_provider, query, start_collector
from fake_openai import COMPLETION_TOKENS, MODEL, PROMPT_TOKENS, fake_openai
from opentelemetry.trace import SpanKind

HERE = Path(__file__).resolve().parent
APPS = ("otel-v2", "openllmetry", "openinference", "litellm")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("foreign")
    col = start_collector(tmp)
    try:
        with fake_openai() as base:
            procs = {app: subprocess.Popen([sys.executable, str(HERE / "foreign_app.py"), app, col.endpoint, base],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for app in APPS}
            for app, p in procs.items():
                out, _ = p.communicate(timeout=120)
                assert p.returncode == 0 and f"sent {app}" in out, out
        _send_spellings(col.endpoint)
        col.wait_written(2 * len(APPS) + len(SPELLINGS) + 2)
    finally:
        assert col.stop() == 0
    return col.db


def _rows(db: Path, service: str) -> list[dict[str, object]]:
    cols = ("model", "response_model", "prompt_tokens", "output_tokens", "finish_reason", "ttft_ms", "attributes")
    got = query(db, f"SELECT {', '.join(cols)} FROM requests WHERE service = ? ORDER BY start_ns", [service])
    return [dict(zip(cols, r)) for r in got]


@pytest.mark.parametrize("app", APPS)
def test_instrumentation_through_collect(store: Path, app: str) -> None:
    rows = _rows(store, app)
    assert len(rows) == 2, rows  # the plain call and the streamed one
    for r in rows:
        assert r["model"] in ("tiny-model", MODEL), r  # OpenInference's llm.model_name is the response's
        assert (r["prompt_tokens"], r["output_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS), r
    plain, streamed = rows
    assert plain["finish_reason"] == "length", plain
    if app != "otel-v2":  # opentelemetry-instrumentation-openai-v2 2.4b0 records no finish reason on streams
        assert streamed["finish_reason"] == "length", streamed
    if app == "litellm":  # its '["length"]' string, kept as sent beside the list
        assert json.loads(plain["attributes"])["llmtrace.finish_reasons.raw"] == '["length"]'  # type: ignore[arg-type]
    if app in ("openllmetry", "openinference"):
        # TTFT from the first-token event (OpenInference) or the first chunk event (OpenLLMetry)
        assert streamed["ttft_ms"] is not None and streamed["ttft_ms"] > 0, streamed
    (n, canon) = query(store, "SELECT count(*), min(finish_reason) FROM passes WHERE service = ? "
                              "AND finish_reason IS NOT NULL", [app])[0]
    assert n >= 1 and canon == "length"


# finish reasons as instrumentations and providers spell them; all are the length cap
SPELLINGS = {"litellm": '["length"]', "anthropic": "max_tokens", "gemini": "MAX_TOKENS", "list": ["length", "stop"],
             "enum": "FinishReason.MAX_TOKENS", "oi-old": None}


def _send_spellings(endpoint: str) -> None:
    tp = otlp_provider(endpoint, "spellings")
    t = tp.get_tracer("spellings")
    for who, reason in SPELLINGS.items():
        attrs: dict[str, object] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "who": who,
                                    "gen_ai.usage.prompt_tokens": 5, "gen_ai.usage.completion_tokens": 3,
                                    "gen_ai.server.time_to_first_token": 0.125}
        if who == "oi-old":  # OpenInference's own key
            attrs = {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.finish_reason": "length",
                     "llm.token_count.prompt": 5, "llm.token_count.completion": 3, "who": who}
        else:
            attrs["gen_ai.response.finish_reasons"] = reason  # type: ignore[assignment]
        t.start_span(f"chat {who}", kind=SpanKind.CLIENT, attributes=attrs).end()
    # OpenLLMetry's @tool span around a function the model called
    t.start_span("get_weather.tool", attributes={"traceloop.span.kind": "tool", "traceloop.entity.name": "get_weather",
                                                 "traceloop.entity.input": '{"city": "Oslo"}'}).end()
    # a span of no known shape that still carries prompt text (an OpenLLMetry workflow)
    t.start_span("plan.workflow", attributes={"traceloop.span.kind": "workflow",
                                              "traceloop.entity.input": "my secret plan"}).end()
    tp.shutdown()


def test_finish_reasons_in_every_spelling_are_normalised(store: Path) -> None:
    rows = query(store, "SELECT r.attributes->>'who', p.finish_reason, p.finish_reason_raw, p.ttft_ms "
                        "FROM passes p JOIN requests r ON r.span_id = p.span_id "
                        "WHERE p.service = 'spellings' ORDER BY 1")
    assert len(rows) == len(SPELLINGS)
    for who, canon, raw, ttft in rows:
        assert canon == "length", (who, canon, raw)
        if who != "oi-old":
            assert ttft == pytest.approx(125.0)
    litellm = _rows(store, "spellings")
    (lite,) = [r for r in litellm if '"who":"litellm"' in str(r["attributes"]).replace(" ", "")]
    assert lite["finish_reason"] == "length"  # not the string '["length"]'


def test_openllmetry_tool_span(store: Path) -> None:
    (row,) = query(store, "SELECT operation, stage, attributes->>'gen_ai.tool.name', attributes FROM spans "
                          "WHERE name = 'get_weather.tool'")
    assert row[:3] == ("execute_tool", "loop.tool_dispatch", "get_weather")
    assert "Oslo" not in row[3] and "traceloop.entity.input.hash" in row[3]  # arguments follow --capture
    ((attrs,),) = query(store, "SELECT attributes FROM spans WHERE name = 'plan.workflow'")
    assert "my secret plan" not in attrs and "traceloop.entity.input.hash" in attrs


def test_foreign_prompts_carry_the_segments_the_cache_analysis_reads(store: Path) -> None:
    """The same user message through four instrumentations: one segment each, the same keyed hash."""
    hashes = {}
    for app in APPS:
        plain = _rows(store, app)[0]
        a = json.loads(plain["attributes"])  # type: ignore[arg-type]
        segs = json.loads(a["llmtrace.prompt.segments"])
        assert [(s["kind"], s["chars"]) for s in segs] == [("user", len("count to twenty"))], (app, segs)
        assert len(segs[0]["chunk_hashes"]) == 1 and "count to twenty" not in plain["attributes"]  # type: ignore[operator]
        hashes[app] = (segs[0]["hash"], a["llmtrace.prompt.hash"])
    assert len(set(hashes.values())) == 1, hashes
