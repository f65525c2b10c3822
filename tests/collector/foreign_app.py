"""An app that uses the real openai SDK under one foreign instrumentation, exporting through the stock
OTLP/HTTP exporter: ``python foreign_app.py {otel-v2|openllmetry|openinference|litellm} OTLP_ENDPOINT BASE_URL``.
LiteLLM is the SDK itself there, with its own ``otel`` callback."""

from __future__ import annotations

import os
import sys
import time

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def litellm_app(endpoint: str, base_url: str) -> None:
    os.environ.update(OTEL_EXPORTER="otlp_http", OTEL_ENDPOINT=endpoint, OTEL_SERVICE_NAME="litellm",
                      LITELLM_LOCAL_MODEL_COST_MAP="True")  # no fetch of its price map (no network in tests)
    import litellm
    from opentelemetry import trace

    litellm.callbacks = ["otel"]
    kw = {"model": "openai/tiny-model", "api_base": base_url, "api_key": "sk-test-not-a-real-key-000000",
          "messages": [{"role": "user", "content": "count to twenty"}], "max_tokens": 8}
    litellm.completion(**kw)
    for _ in litellm.completion(**kw, stream=True, stream_options={"include_usage": True}):
        pass
    time.sleep(1)  # LiteLLM logs success on a thread of its own
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
    print("sent litellm")


def main() -> None:
    which, endpoint, base_url = sys.argv[1:4]
    if which == "litellm":
        return litellm_app(endpoint, base_url)
    tp = TracerProvider(resource=Resource.create({"service.name": which}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
    if which == "otel-v2":
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"  # messages on the span
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif which == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    OpenAIInstrumentor().instrument(tracer_provider=tp)

    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-a-real-key-000000")
    messages = [{"role": "user", "content": "count to twenty"}]
    client.chat.completions.create(model="tiny-model", messages=messages, max_tokens=8)  # type: ignore[arg-type]
    stream = client.chat.completions.create(model="tiny-model", messages=messages, max_tokens=8,  # type: ignore[arg-type]
                                            stream=True, stream_options={"include_usage": True})
    for _ in stream:
        pass
    tp.shutdown()
    print("sent", which)


if __name__ == "__main__":
    main()
