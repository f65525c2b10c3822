"""Failed calls of another instrumentation, through ``llmtrace collect``: GenAI spans as the OpenTelemetry
instrumentations write a failed call (status ERROR, ``error.type`` the SDK exception's class, the exception's text
as the status description, no HTTP status attribute), sent by the stock OTLP exporter to the real collector, are
named by ``diagnose`` by kind at their stage with their message, the key in one of them scrubbed."""

from __future__ import annotations

from pathlib import Path

from collector_helpers import diagnose_service, otlp_provider, start_collector
from opentelemetry.trace import Status, StatusCode

LEAKED = "sk-proj-Qw7eRt9yUi2oPa4sDf6gHj8kLz1xCv"


def _call(tracer: object, model: str, error: tuple[str, str] | None = None) -> None:
    with tracer.start_as_current_span(f"chat {model}") as span:  # type: ignore[attr-defined]
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                             "gen_ai.request.model": model, "server.address": "api.openai.com"})
        if error is None:
            span.set_attributes({"gen_ai.response.model": model, "gen_ai.usage.input_tokens": 40,
                                 "gen_ai.usage.output_tokens": 8, "gen_ai.response.finish_reasons": ["stop"]})
        else:
            kind, message = error
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, message))


def test_foreign_failures_are_named_at_their_stage(tmp_path: Path) -> None:
    col = start_collector(tmp_path)
    try:
        tp = otlp_provider(col.endpoint, "support-bot")
        tracer = tp.get_tracer("opentelemetry.instrumentation.openai_v2")
        for _ in range(3):
            _call(tracer, "gpt-4o-mini")
        for _ in range(2):
            _call(tracer, "gpt-4o-mini", ("openai.RateLimitError", "Error code: 429 - {'error': {'message': "
                                          "'Rate limit reached for gpt-4o-mini', 'code': 'rate_limit_exceeded'}}"))
        _call(tracer, "gpt-5-preview", ("openai.NotFoundError", "Error code: 404 - {'error': {'message': 'The model "
                                        "`gpt-5-preview` does not exist or you do not have access to it.', "
                                        "'code': 'model_not_found'}}"))
        _call(tracer, "gpt-4o-mini", ("openai.AuthenticationError", f"Error code: 401 - Incorrect API key provided: "
                                      f"{LEAKED}."))
        _call(tracer, "gpt-4o-mini", ("openai.APITimeoutError", "Request timed out."))
        tp.force_flush()
        tp.shutdown()
        col.wait_written(8)
        found = [f for f in diagnose_service(col.db, "support-bot") if "failed_calls" in f["symptoms"]]
    finally:
        col.stop()
    by_stage = {f["stage"]: f for f in found}
    text = {s: " ".join(str(e["value"]) for e in f["evidence"]) for s, f in by_stage.items()}
    assert set(by_stage) == {"arrival.admission", "arrival.model_routing", "arrival.connection",
                             "arrival.stream_setup"}, [(f["stage"], f["title"]) for f in found]
    assert "refused for load (HTTP 429)" in by_stage["arrival.admission"]["title"]
    assert "Rate limit reached" in text["arrival.admission"]
    assert "does not exist" in text["arrival.model_routing"] and "404" in by_stage["arrival.model_routing"]["title"]
    assert "Incorrect API key provided" in text["arrival.connection"] and LEAKED not in str(found)
    assert "timed out" in text["arrival.stream_setup"]
    assert found[0]["stage"] == "arrival.admission"  # 2 of 8 calls: the most harm first
