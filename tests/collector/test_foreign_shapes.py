"""A JSON answer cut at the length cap, in the attribute spellings three instrumentations use for the answer
and its finish reason (OpenLLMetry's ``gen_ai.completion.0.*``, OTel GenAI's ``gen_ai.output.messages`` with a
list of finish reasons, OpenInference's ``llm.output_messages.0.*`` with ``llm.finish_reason``), sent by
the stock OTel SDK and OTLP exporter to a real ``llmtrace collect``: the collector reads the answer's shape
from the text before it hashes it, so ``diagnose`` says the structured answers were cut and do not parse
(a warning at ``gen.stop``), and says nothing of the kind on the twin whose answers are whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from collector_helpers import (
    ForeignApp,
    diagnose_service,
    diagnose_services,
    otlp_provider,
    query,
    send_foreign,
    start_collector,
)
from opentelemetry.trace import SpanKind
from testkit import RunningServer

ASK = 'Reply with JSON only, like {"dock": 3, "slot": "07:40"}, for lorry {n}.'
STYLES = ("openllmetry", "genai", "openinference")
CUT, WHOLE = '{"dock": 4, "sl', '{"dock": 4, "slot": "08:10"}'


def _attrs(style: str, i: int, answer: str, reason: str) -> dict[str, Any]:
    ask = ASK.replace("{n}", str(i))
    usage = {"gen_ai.usage.input_tokens": 31, "gen_ai.usage.output_tokens": 9, "gen_ai.request.max_tokens": 9}
    if style == "openllmetry":
        return {"gen_ai.system": "openai", "llm.request.type": "chat", "gen_ai.request.model": "m",
                "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": ask, "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": answer, "gen_ai.completion.0.finish_reason": reason, **usage}
    if style == "genai":
        return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": ask}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": answer}], "finish_reason": reason}]),
                "gen_ai.response.finish_reasons": (reason,), **usage}
    return {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.system": "openai",
            "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": ask,
            "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": answer,
            "llm.finish_reason": reason, "llm.token_count.prompt": 31, "llm.token_count.completion": 9}


@pytest.mark.slow
def test_cut_json_in_every_spelling_is_a_warning(tmp_path: Path) -> None:
    col = start_collector(tmp_path)
    try:
        for style in STYLES:
            for twin in (False, True):
                tp = otlp_provider(col.endpoint, f"{style}-{'twin' if twin else 'cause'}")
                tracer = tp.get_tracer("app")
                for i in range(5):
                    attrs = _attrs(style, i, WHOLE if twin else CUT, "stop" if twin else "length")
                    tracer.start_span("chat m", kind=SpanKind.CLIENT, attributes=attrs).end()
                tp.shutdown()
        col.wait_written(30)
    finally:
        assert col.stop() == 0
    leaks = query(col.db, "SELECT count(*) FROM spans WHERE attributes LIKE '%dock%'")
    assert leaks == [(0,)]  # the shape is read from the text; the text itself is hashed
    services = diagnose_services(col.db, [f"{style}-{run}" for style in STYLES for run in ("cause", "twin")])
    for style in STYLES:
        found = {run: services[f"{style}-{run}"] for run in ("cause", "twin")}
        top = found["cause"][0]
        assert top["stage"] == "gen.stop" and top["severity"] == "warning", (style, found["cause"])
        assert "5 structured answers were cut" in top["title"] and "do not parse" in top["summary"], (style, top)
        assert not [f for f in found["twin"] if f["severity"] != "info"], (style, found["twin"])


GALLERY = ("You plan visits to the Copperleaf gallery. Start the route in the east wing, mention the audio guide "
           "at the desk, and never book tickets yourself; point to the online shop instead. ") * 4


@pytest.mark.slow
def test_openinference_responses_api(tiny_server: RunningServer, tmp_path: Path) -> None:
    """The Responses API under OpenInference: the length cap is only in the response body it records
    (``incomplete_details.reason: max_output_tokens``); a clock ahead of the instructions is still named."""
    col = start_collector(tmp_path)
    calls = [{"messages": [{"role": "system", "content": f"Clock 10:{10 + i}:0{i}. " + GALLERY},
                           {"role": "user", "content": f"A route for group {i}?"}],
              "max_tokens": 5, "stream": i in (3, 6), "api": "responses"} for i in range(8)]
    try:
        send_foreign(col, tmp_path, tiny_server.base_url + "/v1", {"gallery": ForeignApp("openinference", calls)},
                     timeout_s=180)
    finally:
        assert col.stop() == 0
    rows = query(col.db, "SELECT finish_reason, finish_reason_raw FROM passes WHERE service = 'gallery' "
                         "AND prompt_tokens > 0")
    assert len(rows) == 6 and set(rows) == {("length", "max_output_tokens")}, rows  # streamed: no body, no usage
    top = diagnose_service(col.db, "gallery")[0]
    assert top["stage"] == "cache.prefix_match" and "timestamp at char 6 of the system" in top["title"], top
