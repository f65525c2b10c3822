"""Out, too (issue 37 item 4): an app that calls ``llmtrace.init(otlp_endpoint=...)`` and wraps the real OpenAI
SDK with ``instrument()`` sends its spans over the stock OTLP/HTTP exporter, and what arrives is readable by any
OTLP backend in GenAI names: the pass span ``chat {model}`` with the semantic conventions' request, response,
usage and finish-reason names and its latencies under the names docs/integrations/engines.md's mapping table
lists (OTel's ``gen_ai.response.time_to_first_chunk``, vLLM's and SGLang's ``gen_ai.latency.*`` in seconds),
each stage a child span with its ``llmtrace.*`` values. The receiver is a real HTTP server on 127.0.0.1 that
decodes the protobuf body with opentelemetry-proto, as Langfuse, Phoenix or a stock Collector would."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import Script, fake_provider, sse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.tracer.storage.store import read_connection

CHUNK = {"id": "chatcmpl-4411", "model": "gpt-4o-mini-2024-07-18", "object": "chat.completion.chunk"}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005,
         "prompt_tokens_details": {"cached_tokens": 600}}


@dataclass
class Received:
    url: str
    spans: list[dict[str, Any]] = field(default_factory=list)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[Received]:
    got = Received("")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            req = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                for rs in req.resource_spans:
                    resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        got.spans.extend({"name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(),
                                          "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                                          "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                                          "resource": resource,
                                          "attrs": {kv.key: _value(kv.value) for kv in s.attributes}}
                                         for s in ss.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    got.url = f"http://127.0.0.1:{srv.server_address[1]}"  # init adds /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT
    try:
        yield got
    finally:
        srv.shutdown()
        srv.server_close()


def test_init_otlp_endpoint_sends_the_pass_in_genai_names(tmp_path: Path, receiver: Received) -> None:
    db = tmp_path / "app.duckdb"
    llmtrace.init(db=db, otlp_endpoint=receiver.url, service_name="shop", strict=True)
    try:
        with fake_provider() as fp:
            fp.scripts["/v1/chat/completions"] = Script(content_type="text/event-stream", delay_s=0.05, chunks=sse(
                {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Yes, "}}]},
                {**CHUNK, "choices": [{"index": 0, "delta": {"content": "it left today."}}]},
                {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {**CHUNK, "choices": [], "usage": USAGE}))
            client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))
            stream = client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                                    stream_options={"include_usage": True},
                                                    messages=[{"role": "user", "content": "Is order 4411 shipped?"}])
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Yes, it left today."
    finally:
        llmtrace.shutdown()  # flushes the OTLP exporter and the store
    passes = [s for s in receiver.spans if s["name"] == "chat gpt-4o-mini"]
    assert len(passes) == 1, [s["name"] for s in receiver.spans]
    p, a = passes[0], passes[0]["attrs"]
    assert p["kind"] == 3 and p["resource"]["service.name"] == "shop"  # SPAN_KIND_CLIENT
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"], a["gen_ai.request.model"],
            a["gen_ai.response.model"], a["gen_ai.response.id"]) == (
        "chat", "openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "chatcmpl-4411")
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"],
            a["gen_ai.usage.cache_read.input_tokens"]) == (1000, 5, 600)
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    # the latencies in the mapping table's names, in seconds, agreeing with the pass's own values
    ttft_s, e2e_s = a["llmtrace.ttft_ms"] / 1e3, (p["end"] - p["start"]) / 1e9
    assert 0 < ttft_s < e2e_s
    assert a["gen_ai.response.time_to_first_chunk"] == pytest.approx(ttft_s)
    assert a["gen_ai.latency.time_to_first_token"] == pytest.approx(ttft_s)
    # each stage a child of the pass, in the one trace; the same spans the app's own store holds
    stages = {s["attrs"]["llmtrace.stage"]: s for s in receiver.spans if "llmtrace.stage" in s["attrs"]}
    assert {"gen.streaming", "gen.stop", "cache.prefix_match", "meters.cache_accounting"} <= set(stages)
    assert all(s["parent"] == p["span_id"] and s["trace_id"] == p["trace_id"] for s in stages.values())
    assert stages["cache.prefix_match"]["attrs"]["gen_ai.usage.cache_read.input_tokens"] == 600
    assert stages["gen.streaming"]["attrs"]["gen_ai.response.time_to_first_chunk"] > 0
    with read_connection(db) as conn:
        stored = {r[0] for r in conn.execute("SELECT span_id FROM spans").fetchall()}
        row = conn.execute("SELECT attributes FROM spans WHERE span_id = ?", [p["span_id"]]).fetchone()
    assert stored == {s["span_id"] for s in receiver.spans}
    assert json.loads(row[0])["gen_ai.latency.time_to_first_token"] == pytest.approx(ttft_s)
    assert "4411 shipped" not in json.dumps([s["attrs"] for s in receiver.spans])  # hashes: no prompt text out
