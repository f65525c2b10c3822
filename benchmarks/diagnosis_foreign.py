"""One app of the diagnosis corpus under a foreign instrumentation: the real openai SDK (or LiteLLM, or
langchain-openai's ChatOpenAI) wrapped by another project's OpenTelemetry instrumentation, calling
``llmtrace serve``, its spans sent by the stock OTLP/HTTP exporter to ``llmtrace collect``.

    python benchmarks/diagnosis_foreign.py INSTRUMENTATION CALLS_JSON OTLP_ENDPOINT BASE_URL SERVICE

INSTRUMENTATION: otel-v2 (opentelemetry-instrumentation-openai-v2), openllmetry (opentelemetry-
instrumentation-openai), openinference (openinference-instrumentation-openai), litellm (LiteLLM's ``otel``
callback; litellm-anthropic: the same against the server's Anthropic Messages API), langchain (langchain-
openai's ChatOpenAI under openinference's openai instrumentor). CALLS_JSON is a file holding
``{"model": ..., "calls": [{"messages": [...], "max_tokens": N, "stream": bool, "tools"?, "stop"?,
"api"?: "responses"}],
"content": bool?}``. Each package's own content-capture switch is turned on, as a user who wants prompt
analysis would, unless ``content`` is false (then no prompt text leaves the app).

A separate process per app: instrumentations patch the SDK module-wide.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

API_KEY = "sk-corpus-not-a-real-key-0000000000"
# request fields a call may carry beyond messages and max_tokens
PASSED = ("tools", "stop", "response_format", "frequency_penalty", "presence_penalty")


def _provider(endpoint: str, service: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10),
                                             schedule_delay_millis=100))
    return tp


def _responses_call(client: Any, model: str, c: dict[str, Any]) -> None:
    """The Responses API: the system messages as ``instructions``, the rest as ``input``."""
    system = "\n".join(m["content"] for m in c["messages"] if m["role"] == "system")
    rest = [m for m in c["messages"] if m["role"] != "system"]
    kw: dict[str, Any] = {"model": model, "instructions": system or None, "input": rest,
                          "max_output_tokens": c["max_tokens"], "temperature": 0}
    if c.get("stream"):
        with client.responses.stream(**kw) as events:
            for _ in events:
                pass
    else:
        client.responses.create(**kw)


def _openai_calls(client: Any, model: str, calls: list[dict[str, Any]]) -> None:
    for c in calls:
        if c.get("api") == "responses":
            _responses_call(client, model, c)
            continue
        kw: dict[str, Any] = {"model": model, "messages": c["messages"], "max_tokens": c["max_tokens"],
                              "temperature": 0}
        kw.update({k: c[k] for k in PASSED if c.get(k)})
        if c.get("stream"):
            for _ in client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}):
                pass
        else:
            client.chat.completions.create(**kw)


def _litellm(endpoint: str, base_url: str, service: str, model: str, calls: list[dict[str, Any]],
             provider: str = "openai", content: bool = True) -> None:
    os.environ.update(OTEL_EXPORTER="otlp_http", OTEL_ENDPOINT=endpoint, OTEL_SERVICE_NAME=service,
                      LITELLM_LOCAL_MODEL_COST_MAP="True")  # no fetch of its price map
    import litellm
    from opentelemetry import trace

    litellm.callbacks = ["otel"]
    litellm.turn_off_message_logging = not content
    for c in calls:
        # Anthropic's Messages API lives at the server's root (/v1/messages), OpenAI's under /v1
        api_base = base_url.removesuffix("/v1") if provider == "anthropic" else base_url
        kw: dict[str, Any] = {"model": f"{provider}/{model}", "api_base": api_base, "api_key": API_KEY,
                              "messages": c["messages"], "max_tokens": c["max_tokens"], "temperature": 0}
        kw.update({k: c[k] for k in PASSED if c.get(k)})
        if c.get("stream"):
            for _ in litellm.completion(**kw, stream=True, stream_options={"include_usage": True}):
                pass
        else:
            litellm.completion(**kw)
    time.sleep(1.0)  # LiteLLM logs success on a thread of its own
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]


def main() -> None:
    which, calls_file, endpoint, base_url, service = sys.argv[1:6]
    spec = json.loads(Path(calls_file).read_text())
    model, calls = spec["model"], spec["calls"]
    content = spec.get("content", True)  # false: each package's default or its switch off, no prompt text
    if which in ("litellm", "litellm-anthropic"):
        _litellm(endpoint, base_url, service, model, calls, "anthropic" if which == "litellm-anthropic" else "openai",
                 content)
        print("sent", len(calls))
        return
    tp = _provider(endpoint, service)
    if which == "otel-v2":
        if content:  # off by default
            os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
        os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif which == "openllmetry":
        os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if content else "false"
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    else:  # openinference, and langchain through it
        if not content:
            os.environ.update(OPENINFERENCE_HIDE_INPUTS="true", OPENINFERENCE_HIDE_OUTPUTS="true")
        from openinference.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    OpenAIInstrumentor().instrument(tracer_provider=tp)
    if which == "langchain":
        from langchain_openai import ChatOpenAI

        for c in calls:
            llm = ChatOpenAI(model=model, base_url=base_url, api_key=API_KEY, max_tokens=c["max_tokens"],  # type: ignore[arg-type]
                             temperature=0, streaming=bool(c.get("stream")), stream_usage=True,
                             stop=c.get("stop"))
            msgs = [(m["role"] if m["role"] != "user" else "human", m["content"]) for m in c["messages"]]
            if c.get("stream"):
                for _ in llm.stream(msgs):
                    pass
            else:
                llm.invoke(msgs)
    else:
        import openai

        _openai_calls(openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0), model, calls)
    tp.shutdown()
    print("sent", len(calls))


if __name__ == "__main__":
    main()
