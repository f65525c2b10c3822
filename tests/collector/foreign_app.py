"""An app that uses the real openai SDK under one foreign instrumentation, exporting through the stock
OTLP/HTTP exporter: ``python foreign_app.py {otel-v2|openllmetry|openinference} OTLP_ENDPOINT OPENAI_BASE_URL``."""

from __future__ import annotations

import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main() -> None:
    which, endpoint, base_url = sys.argv[1:4]
    tp = TracerProvider(resource=Resource.create({"service.name": which}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
    if which == "otel-v2":
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
