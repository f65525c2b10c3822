"""One app of the diagnosis corpus under a foreign instrumentation: the real openai SDK (or LiteLLM, or
langchain-openai's ChatOpenAI) wrapped by another project's OpenTelemetry instrumentation, calling
``llmtrace serve``, its spans sent by the stock OTLP/HTTP exporter to ``llmtrace collect``.

    python benchmarks/diagnosis_foreign.py INSTRUMENTATION CALLS_JSON OTLP_ENDPOINT BASE_URL SERVICE

INSTRUMENTATION: otel-v2 (opentelemetry-instrumentation-openai-v2), openllmetry (opentelemetry-
instrumentation-openai), openinference (openinference-instrumentation-openai), litellm (LiteLLM's ``otel``
callback; litellm-anthropic: the same against the server's Anthropic Messages API), langchain (langchain-
openai's ChatOpenAI under openinference's openai instrumentor). CALLS_JSON is a file holding
``{"model": ..., "calls": [{"messages": [...], "max_tokens": N, "stream": bool, "tools"?, "stop"?,
"api"?: "responses", "turn"?: id, "tools_run"?: [{"name", "arguments", "result"?, "error"?}]}],
"content": bool?}``. Each package's own content-capture switch is turned on, as a user who wants prompt
analysis would, unless ``content`` is false (then no prompt text leaves the app).

Calls that name a ``turn`` run inside one agent span a turn, and the tools in a call's ``tools_run`` follow it as
tool spans, written as that instrumentation's users write them (an agent's own spans: OTel GenAI
``execute_tool``, OpenInference TOOL, OpenLLMetry ``@tool``).

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


# An agent's own spans as each instrumentation's users write them (the packages above trace the model calls
# only): the turn that holds the calls, and each tool the agent ran after a call, its arguments and result.
_AGENT = {"otel-v2": {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "orders"},
          "openinference": {"openinference.span.kind": "AGENT"},
          "openllmetry": {"traceloop.span.kind": "agent", "traceloop.entity.name": "orders"}}


def _tool_attrs(which: str, run: dict[str, Any]) -> dict[str, Any]:
    result = run.get("result")
    if which == "openinference":
        return {"openinference.span.kind": "TOOL", "tool.name": run["name"], "input.value": run["arguments"],
                **({"output.value": result} if result is not None else {})}
    if which == "openllmetry":
        return {"traceloop.span.kind": "tool", "traceloop.entity.name": run["name"],
                "traceloop.entity.input": json.dumps({"args": [], "kwargs": json.loads(run["arguments"])}),
                **({"traceloop.entity.output": result} if result is not None else {})}
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": run["name"],
            "gen_ai.tool.call.arguments": run["arguments"], **({"gen_ai.tool.call.result": result} if result else {})}


def _agent_calls(tp: Any, which: str, client: Any, model: str, calls: list[dict[str, Any]]) -> None:
    """Calls grouped by their "turn" under one agent span each; after a call, the tools in its "tools_run"."""
    from opentelemetry.trace import Status, StatusCode

    tracer = tp.get_tracer("corpus-agent")
    k = 0
    while k < len(calls):
        turn = calls[k].get("turn")
        with tracer.start_as_current_span("invoke_agent orders", attributes=_AGENT.get(which, _AGENT["otel-v2"])):
            while k < len(calls) and calls[k].get("turn") == turn:
                _openai_calls(client, model, [calls[k]])
                for run in calls[k].get("tools_run") or ():
                    with tracer.start_as_current_span(f"execute_tool {run['name']}",
                                                      attributes=_tool_attrs(which, run)) as span:
                        if run.get("error"):
                            span.set_attribute("error.type", run["error"])
                            span.set_status(Status(StatusCode.ERROR, run["error"]))
                k += 1


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
            if c.get("response_format"):  # passed through to the chat completions call, as a user binds it
                llm = llm.bind(response_format=c["response_format"])  # type: ignore[assignment]
            # a conversation with tool calls and results goes as OpenAI-shaped dicts (LangChain turns them into
            # AIMessage tool_calls and ToolMessages); plain turns as (role, text) pairs
            tooled = any(m.get("tool_calls") or m["role"] == "tool" for m in c["messages"])
            msgs: Any = c["messages"] if tooled else [(m["role"] if m["role"] != "user" else "human", m["content"])
                                                      for m in c["messages"]]
            if c.get("stream"):
                for _ in llm.stream(msgs):
                    pass
            else:
                llm.invoke(msgs)
    else:
        import openai

        client = openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
        if any("turn" in c for c in calls):
            _agent_calls(tp, which, client, model, calls)
        else:
            _openai_calls(client, model, calls)
    tp.shutdown()
    print("sent", len(calls))


if __name__ == "__main__":
    main()
