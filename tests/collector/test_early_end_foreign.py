"""Early ends of another instrumentation's spans, through ``llmtrace collect`` (issue 35 item 1 on foreign
spans): chat spans as OTel GenAI (openai-v2) and OpenLLMetry write them, sent by the stock OTLP exporter to the
real collector in hashes mode, get the ``gen.stop`` row our own spans get (the end kind from the finish reason,
the error status and the request's stop strings; what preceded the cut and what it was inside), and
``diagnose`` names a stop string that fired inside content as it does for the middleware. No answer text is
stored."""

from __future__ import annotations

import json
from pathlib import Path

from collector_helpers import diagnose_service, otlp_provider, query, start_collector
from opentelemetry.trace import Status, StatusCode

MODEL = "gpt-4o-mini"
CUT = ['{"answer": "Take 2', '{"answer": "Take 0', '{"answer": "Take 7', '{"answer": "Take 12']
WHOLE = ['{"answer": "Take 2.5 ml twice a day"}', '{"answer": "Take 0.5 tablet at night"}',
         '{"answer": "Take 7.5 mg with food"}', '{"answer": "Take 12.5 mg after breakfast"}']


def _genai(tracer: object, text: str | None, reason: str | None, stop: list[str] | None = None,
           error: str | None = None, tool: bool = False) -> None:
    """A chat span as openai-v2 writes it under gen_ai_latest_experimental (output messages with their reason)."""
    with tracer.start_as_current_span(f"chat {MODEL}") as span:  # type: ignore[attr-defined]
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                             "gen_ai.request.model": MODEL, "gen_ai.usage.input_tokens": 60,
                             "gen_ai.usage.output_tokens": 9})
        if stop is not None:
            span.set_attribute("gen_ai.request.stop_sequences", stop)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, "Request timed out."))
            return
        parts = [{"type": "tool_call", "name": "lookup", "arguments": {"id": 4}}] if tool else \
            [{"type": "text", "content": text}]
        span.set_attributes({"gen_ai.response.finish_reasons": [reason],
                             "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts,
                                                                     "finish_reason": reason}])})


def _openllmetry(tracer: object, text: str) -> None:
    """OpenLLMetry's chat span: the completion as indexed attributes, no stop strings recorded."""
    with tracer.start_as_current_span("openai.chat") as span:  # type: ignore[attr-defined]
        span.set_attributes({"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL,
                             "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Where is ticket 41?",
                             "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": text,
                             "gen_ai.completion.0.finish_reason": "stop", "gen_ai.usage.input_tokens": 30,
                             "gen_ai.usage.output_tokens": 6})


def _send(endpoint: str) -> None:
    for service, calls in (("dosing", [(t, "stop", ["."]) for t in CUT]),
                           ("dosing-twin", [(t, "stop", None) for t in WHOLE]),
                           ("ends", [('{"answer": "Take 2.5 ml"}', "length", None),
                                     ('{"answer": "Take', "content_filter", None), (None, "tool_calls", None),
                                     ('{"answer": "Take 2.5 ml"}', "stop", ["\n\n"])])):
        tp = otlp_provider(endpoint, service)
        tracer = tp.get_tracer("opentelemetry.instrumentation.openai_v2")
        for text, reason, stop in calls:
            _genai(tracer, text, reason, stop, tool=reason == "tool_calls")
        if service == "ends":
            _genai(tracer, None, None, error="openai.APITimeoutError")
        tp.force_flush()
        tp.shutdown()
    tp = otlp_provider(endpoint, "repairs")
    tracer = tp.get_tracer("opentelemetry.instrumentation.openai")
    for i in range(4):
        _openllmetry(tracer, f'{{"answer": "Ticket {41 + i}')
    tp.force_flush()
    tp.shutdown()


def test_foreign_ends_read_as_our_own(tmp_path: Path) -> None:
    col = start_collector(tmp_path)  # hashes mode: the answers' text is not kept
    try:
        _send(col.endpoint)
        col.wait_written(17)
        found = {s: diagnose_service(col.db, s) for s in ("dosing", "dosing-twin", "repairs")}
        rows = query(col.db, """SELECT p.service, s.attributes->>'llmtrace.stop.kind',
                                       s.attributes->>'llmtrace.stop.preceded_by', s.attributes->>'llmtrace.stop.inside',
                                       s.attributes->>'llmtrace.stop.string_class'
                                FROM spans s JOIN spans p ON p.span_id = s.parent_span_id
                                WHERE s.stage = 'gen.stop' ORDER BY p.service, s.start_ns""")
        stored = " ".join(str(r) for r in query(col.db, "SELECT attributes FROM spans"))
    finally:
        col.stop()
    kinds: dict[str, list[tuple[object, ...]]] = {}
    for service, *values in rows:
        kinds.setdefault(str(service), []).append(tuple(values))
    assert kinds["dosing"] == [("stop_unknown", "digit", "json_string", "period")] * 4, kinds
    assert {k for k, *_ in kinds["dosing-twin"]} == {"end_turn"}
    assert [k for k, *_ in kinds["ends"]] == ["length", "content_filter", "tool_call", "stop_unknown", "error"]
    assert kinds["ends"][3][1:3] == ("punct", "none")  # a complete JSON value: its end, not a cut
    # no stop strings on record: the open JSON string says something other than the turn's end cut it
    assert kinds["repairs"] == [("stop_unknown", "digit", "json_string", None)] * 4, kinds
    top = found["dosing"][0]
    assert top["stage"] == "gen.stop" and top["severity"] != "info", top
    assert "mid-number" in top["title"] and "inside a JSON string" in top["title"], top["title"]
    assert found["repairs"][0]["stage"] == "gen.stop", found["repairs"]
    assert "a stop string the spans do not name" in found["repairs"][0]["title"], found["repairs"][0]["title"]
    assert not [f for f in found["dosing-twin"] if f["severity"] != "info"], found["dosing-twin"]
    assert "Take 2.5" not in stored and "Ticket 41" not in stored  # hashes mode: classes and offsets only
