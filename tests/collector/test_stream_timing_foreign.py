"""Foreign tracers' TTFT against ``llmtrace serve`` is the server's own: OpenInference and OpenLLMetry wrap the
real openai SDK, stream from the real server (tiny model, a long cold prompt so prefill is slow enough to
see) and export through the stock OTLP exporter to a real ``llmtrace collect``. Both stamp "first token" at
the first chunk the SDK yields (OpenInference's "First Token Stream Event", OpenLLMetry's chunk events); the
server used to send its role-only opening chunk before prefill, so they read ~5 ms against a TTFT of
hundreds. Each call has its own max_tokens, which both sides record, to pair a foreign pass with the server's.

Run as a script, this file is the app: ``python test_stream_timing_foreign.py WHICH OTLP_ENDPOINT BASE_URL``."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

# (instrumentation, call, max_tokens): max_tokens tells the calls apart in both stores
CALLS = (("openinference", "chat", 5), ("openinference", "responses", 6), ("openllmetry", "chat", 7),
         ("openllmetry", "tools", 60))
# a required tool call: the server holds the call's text back and sends it whole at the end, so a stream's
# chunks are the opening (with the first token), the call and the finish, all but the first at the end
TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "find an order",
    "parameters": {"type": "object", "properties": {"status": {"type": "string", "enum": ["open", "closed"]}},
                   "required": ["status"], "additionalProperties": False}}}]


def _prompt() -> str:
    # ~600 tokens, new each call (a fresh nonce first): a cold prefill of tens to hundreds of ms here
    return f"[{uuid.uuid4().hex}] " + " ".join(f"crate {i} holds {i * 13 % 89} tins;" for i in range(120))


def app(which: str, endpoint: str, base_url: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": which}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10),
                                             schedule_delay_millis=100))
    if which == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    OpenAIInstrumentor().instrument(tracer_provider=tp)
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-timing-not-a-real-key-0000000", max_retries=0)
    for who, call, max_tokens in CALLS:
        if who != which:
            continue
        if call == "responses":
            stream = client.responses.create(model="tiny", input=_prompt(), max_output_tokens=max_tokens,
                                             stream=True)
        else:
            tools = {"tools": TOOLS, "tool_choice": "required"} if call == "tools" else {}
            stream = client.chat.completions.create(  # type: ignore[call-overload]
                model="tiny", messages=[{"role": "user", "content": _prompt()}], max_tokens=max_tokens,
                stream=True, stream_options={"include_usage": True}, **tools)
        for _ in stream:
            pass
    tp.shutdown()
    print("sent", which)


if __name__ == "__main__":
    app(*sys.argv[1:4])
    sys.exit(0)

import pytest  # noqa: E402 - the app above runs without pytest
from collector_helpers import query, start_collector  # noqa: E402
from testkit import start_server, stop_server  # noqa: E402


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("stream_timing")
    server = start_server(tmp)
    col = start_collector(tmp)
    try:
        for which in dict.fromkeys(w for w, _, _ in CALLS):
            out = subprocess.run([sys.executable, __file__, which, col.endpoint, server.base_url + "/v1"],
                                 capture_output=True, text=True, timeout=180)
            assert out.returncode == 0 and "sent" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
        col.wait_written(len(CALLS), timeout_s=60)
    finally:
        assert col.stop() == 0
        stop_server(server)  # flushes the server's store
    yield server.db_path, col.db


@pytest.mark.slow
@pytest.mark.parametrize(("which", "call", "max_tokens"), CALLS)
def test_foreign_ttft_is_the_servers(stores: tuple[Path, Path], which: str, call: str, max_tokens: int) -> None:
    server_db, foreign_db = stores
    ((server_ttft, server_duration, server_prompt),) = query(
        server_db, "SELECT ttft_ms, duration_ms, prompt_tokens FROM requests WHERE max_tokens = ? AND status = 'ok'",
        [max_tokens])
    ((ttft, duration, prompt),) = query(
        foreign_db, "SELECT ttft_ms, duration_ms, prompt_tokens FROM passes WHERE service = ? AND max_tokens = ?",
        [which, max_tokens])
    assert prompt in (None, server_prompt), (prompt, server_prompt)  # the same call (Responses streams: no usage)
    assert server_ttft is not None and ttft is not None, (server_ttft, ttft)
    print(f"{which} {call}: foreign TTFT {float(ttft):.1f} ms, server's {float(server_ttft):.1f} ms")
    # the foreign span starts before the request is sent, so its TTFT holds the server's; half is the margin
    # for clocks and a loaded machine, and stays far above the ~5 ms the opening chunk used to give
    assert 0.5 * float(server_ttft) <= float(ttft) <= float(duration), (which, call, ttft, server_ttft, duration)
    if call == "tools":  # and it is the first token's time, not the end's: nearer the server's TTFT than its end
        decode = float(server_duration) - float(server_ttft)
        assert float(ttft) - float(server_ttft) < 0.5 * decode, (ttft, server_ttft, server_duration)
