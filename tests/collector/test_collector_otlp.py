"""The stock OpenTelemetry OTLP/HTTP exporter, unmodified, pointed at the real ``llmtrace collect``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
from collector_helpers import otlp_provider, query, start_collector
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from llmtrace.tracer import recording as rec


def _send_plain_spans(endpoint: str, n: int, *, gzip_: bool) -> set[tuple[str, str]]:
    tp = otlp_provider(endpoint, "shop-api", gzip=gzip_, **{"service.version": "v7"})
    tracer = tp.get_tracer("test")
    ids: set[tuple[str, str]] = set()
    for i in range(n):
        with tracer.start_as_current_span("GET /cart", attributes={"http.route": "/cart", "i": i, "ratio": 0.5,
                                                                   "tags": ["a", "b"], "ok": True}) as root:
            ctx = root.get_span_context()
            ids.add((f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"))
            with tracer.start_as_current_span("db.query") as child:
                c = child.get_span_context()
                ids.add((f"{c.trace_id:032x}", f"{c.span_id:016x}"))
                if i % 10 == 0:
                    child.set_status(Status(StatusCode.ERROR, "timeout"))
    tp.shutdown()
    return ids


def test_stock_exporter_protobuf_and_gzip(tmp_path: Path) -> None:
    col = start_collector(tmp_path)
    try:
        sent = _send_plain_spans(col.endpoint, 300, gzip_=False)
        sent |= _send_plain_spans(col.endpoint, 200, gzip_=True)
        col.wait_written(len(sent))
        stats = col.stats()
        assert stats["spans_accepted"] == len(sent) == 1000
        assert stats.get("http_400", 0) == 0
    finally:
        assert col.stop() == 0
    rows = query(col.db, "SELECT trace_id, span_id FROM spans")
    assert set(rows) == sent and len(rows) == len(sent)
    (child,) = query(col.db, "SELECT parent_span_id, status, status_message, service, deploy, kind FROM spans "
                             "WHERE name = 'db.query' AND status = 'error' LIMIT 1")
    assert len(child[0]) == 16 and child[1:] == ("error", "timeout", "shop-api", "v7", "internal")
    (attrs, res) = query(col.db, "SELECT attributes, resource FROM spans WHERE name = 'GET /cart' LIMIT 1")[0]
    a = json.loads(attrs)
    assert a["http.route"] == "/cart" and a["tags"] == ["a", "b"] and a["ok"] is True and a["ratio"] == 0.5
    assert json.loads(res)["service.name"] == "shop-api"


def test_llmtrace_spans_over_otlp_fill_the_views(tmp_path: Path) -> None:
    """An app using llmtrace's recording API with only an OTLP exporter lands in the same views."""
    col = start_collector(tmp_path)
    tp = otlp_provider(col.endpoint, "agent")
    rec.configure(tp.get_tracer("llmtrace"), strict=True)
    try:
        with rec.start_pass("smol", side="server", attributes={"gen_ai.usage.input_tokens": 120,
                                                                "gen_ai.usage.cache_read.input_tokens": 90,
                                                                "llmtrace.ttft_ms": 41.5,
                                                                "gen_ai.response.finish_reasons": ["stop"]}) as p:
            rec.record_stage("forward.prefill", start_ns=rec.now_ns(), end_ns=rec.now_ns() + 1000,
                             values={"llmtrace.prefill.tokens": 30}, parent=p)
        tp.shutdown()
        col.wait_written(2)
    finally:
        rec.configure(None)
        col.stop()
    (row,) = query(col.db, "SELECT model, prompt_tokens, cached_tokens, hit_ratio, ttft_ms, finish_reason, side, "
                           "service FROM requests")
    assert row == ("smol", 120, 90, 0.75, 41.5, "stop", "server", "agent")
    assert query(col.db, "SELECT stage, phase, stage_number FROM stages") == [("forward.prefill", "forward", 23)]


def _otlp_json(spans: list[object]) -> bytes:
    """OTLP/JSON as the spec writes it: protobuf JSON mapping, but ids in hex rather than base64."""
    doc = json_format.MessageToDict(encode_spans(spans))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        import base64

                        s[k] = base64.b64decode(s[k]).hex()
    return json.dumps(doc).encode()


def test_json_encoding_plain_and_gzip(tmp_path: Path) -> None:
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    t = tp.get_tracer("t")
    with t.start_as_current_span("outer", attributes={"n": 3}), t.start_as_current_span("inner"):
        pass
    spans = list(exp.get_finished_spans())
    body = _otlp_json(spans)
    col = start_collector(tmp_path)
    try:
        r = httpx.post(col.endpoint, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        r = httpx.post(col.endpoint, content=gzip.compress(body),
                       headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        assert r.status_code == 200
        col.wait_written(4)
    finally:
        col.stop()
    rows = query(col.db, "SELECT DISTINCT trace_id, span_id, parent_span_id, name FROM spans ORDER BY name")
    inner, outer = (s for s in sorted(spans, key=lambda s: s.name))
    assert rows == [
        (f"{inner.context.trace_id:032x}", f"{inner.context.span_id:016x}", f"{outer.context.span_id:016x}", "inner"),
        (f"{outer.context.trace_id:032x}", f"{outer.context.span_id:016x}", None, "outer"),
    ]
