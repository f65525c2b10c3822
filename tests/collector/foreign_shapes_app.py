"""An app making the calls real users make, under one foreign instrumentation, exporting through the stock
OTLP/HTTP exporter: ``python foreign_shapes_app.py WHICH OTLP_ENDPOINT BASE_URL SERVICE CONTENT CALLS``.

WHICH: otel-v2, openllmetry, openinference or litellm (LiteLLM's own ``otel`` callback). CONTENT 1 turns the
package's content capture on, 0 leaves it off (OpenInference: OPENINFERENCE_HIDE_INPUTS/OUTPUTS, LiteLLM:
turn_off_message_logging). CALLS: comma-separated names from ``CALLS`` below. A refused call's exception is
caught, as an app would, so its span is still sent."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

KEY = "sk-shapes-not-a-real-key-00000000"
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
MSGS = [{"role": "system", "content": "You count words."}, {"role": "user", "content": "count to eight"}]
# the turn after a tool call: the assistant's call and the tool's answer in the input
TOOL_TURN = [*MSGS, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "eight words"}]
STREAM = {"stream": True, "stream_options": {"include_usage": True}}
CALLS: dict[str, dict[str, Any]] = {
    "plain": {"messages": MSGS},
    "stream": {"messages": MSGS, **STREAM},
    "tools": {"messages": TOOL_TURN, "tools": TOOLS},
    "stream_tools": {"messages": TOOL_TURN, "tools": TOOLS, **STREAM},
    "stream_n2": {"messages": MSGS, "n": 2, **STREAM},
    "err400": {"messages": MSGS, "model": "err400"},
    "err429": {"messages": MSGS, "model": "err429", **STREAM},
    "responses": {"responses": True},
    "responses_stream": {"responses": True, "stream": True},
    "anthropic": {"messages": MSGS, "provider": "anthropic"},  # LiteLLM only: its Anthropic Messages client
}


def _consume(result: Any) -> None:
    if not hasattr(result, "choices") and hasattr(result, "__iter__"):
        for _ in result:
            pass


def _run(call: Callable[..., Any], **kw: Any) -> None:
    try:
        _consume(call(**kw))
    except Exception as exc:  # noqa: BLE001 - a refused call: the app carries on, its span is sent
        print("refused", type(exc).__name__)


def litellm_app(endpoint: str, base_url: str, service: str, content: bool, names: list[str]) -> None:
    os.environ.update(OTEL_EXPORTER="otlp_http", OTEL_ENDPOINT=endpoint, OTEL_SERVICE_NAME=service,
                      LITELLM_LOCAL_MODEL_COST_MAP="True")  # no fetch of its price map (no network in tests)
    import litellm
    from opentelemetry import trace

    litellm.callbacks = ["otel"]
    litellm.turn_off_message_logging = not content
    for name in names:
        spec = dict(CALLS[name])
        model, provider = spec.pop("model", "shapes"), spec.pop("provider", "openai")
        base = base_url.removesuffix("/v1") if provider == "anthropic" else base_url  # it adds /v1/messages
        _run(litellm.completion, model=f"{provider}/{model}", api_base=base, api_key=KEY, max_tokens=8,
             num_retries=0, **spec)
    time.sleep(1.0)  # LiteLLM logs on a thread of its own
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]


def main() -> None:
    which, endpoint, base_url, service, content_flag, calls = sys.argv[1:7]
    content, names = content_flag == "1", calls.split(",")
    if which == "litellm":
        litellm_app(endpoint, base_url, service, content, names)
        print("sent", len(names))
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10),
                                             schedule_delay_millis=100))
    if which == "otel-v2":
        if content:
            os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif which == "openllmetry":
        os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if content else "false"
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    else:
        if not content:
            os.environ.update(OPENINFERENCE_HIDE_INPUTS="true", OPENINFERENCE_HIDE_OUTPUTS="true")
        from openinference.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    OpenAIInstrumentor().instrument(tracer_provider=tp)
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    for name in names:
        spec = dict(CALLS[name])
        if spec.pop("responses", False):
            _run(client.responses.create, model="shapes", input="count to eight", max_output_tokens=8, **spec)
            continue
        model = spec.pop("model", "shapes")
        _run(client.chat.completions.create, model=model, max_tokens=8, **spec)
    tp.shutdown()
    print("sent", len(names))


if __name__ == "__main__":
    main()
