"""The OTLP decoder on its own: value types, events, odd fields, and compressed bodies."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from llmtrace.tracer.collect.otlp_decode import PayloadError, PayloadTooLarge, decode, decompress
from llmtrace.tracer.collect.otlp_mapping import Mapper
from llmtrace.tracer.storage.views import SPAN_COLUMNS


def _req() -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "svc"
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.version", "v3"
    s = rs.scope_spans.add().spans.add()
    s.trace_id, s.span_id, s.parent_span_id = b"\x01" * 16, b"\x02" * 8, b"\x00" * 8
    s.name, s.kind = "x", 99  # an unknown kind reads as internal
    s.start_time_unix_nano, s.end_time_unix_nano = 2_000_000, 0  # a missing end reads as the start
    s.status.code, s.status.message = 2, "boom"
    a = s.attributes.add()
    a.key = "arr"
    for v in (1, 2):
        a.value.array_value.values.add().int_value = v
    a = s.attributes.add()
    a.key = "kv"
    inner = a.value.kvlist_value.values.add()
    inner.key, inner.value.double_value = "d", 1.5
    a = s.attributes.add()
    a.key, a.value.bytes_value = "raw", b"\xff\x00"
    a = s.attributes.add()
    a.key = "empty"  # a key with no value is skipped
    e = s.events.add()
    e.name, e.time_unix_nano = "exception", 2_000_500
    ea = e.attributes.add()
    ea.key, ea.value.string_value = "exception.message", "bad"
    return req


def test_value_types_events_and_defaults() -> None:
    d = decode(_req().SerializeToString(), "application/x-protobuf", None, max_bytes=1 << 20, mapper=Mapper())
    assert d.table.column_names == [n for n, _ in SPAN_COLUMNS]
    row = d.table.to_pylist()[0]
    assert row["trace_id"] == "01" * 16 and row["span_id"] == "02" * 8 and row["parent_span_id"] is None
    assert (row["kind"], row["start_ns"], row["end_ns"], row["duration_ms"]) == ("internal", 2_000_000, 2_000_000, 0.0)
    assert (row["status"], row["status_message"], row["service"], row["deploy"]) == ("error", "boom", "svc", "v3")
    assert json.loads(row["attributes"]) == {"arr": [1, 2], "kv": {"d": 1.5}, "raw": "/wA="}
    assert json.loads(row["events"]) == [{"name": "exception", "ts": 2_000_500,
                                          "attributes": {"exception.message": "bad"}}]


def test_compression_and_limits() -> None:
    body = _req().SerializeToString()
    assert decompress(gzip.compress(body), "gzip", 1 << 20) == body
    assert decompress(zlib.compress(body), "deflate", 1 << 20) == body
    assert decompress(body, None, 1 << 20) == body
    with pytest.raises(PayloadTooLarge):
        decompress(gzip.compress(b"\0" * 10_000), "gzip", 1000)
    with pytest.raises(PayloadError, match="truncated"):
        decompress(gzip.compress(body)[:-12], "gzip", 1 << 20)
    with pytest.raises(PayloadError, match="Content-Encoding"):
        decompress(body, "br", 1 << 20)


def test_vllm_span_with_only_some_latencies() -> None:
    m = Mapper()
    out = m.map("llm_request", "server", {"gen_ai.latency.time_to_first_token": 0.05,
                                          "gen_ai.usage.completion_tokens": 1}, "a" * 32, "b" * 16, 0, 10**8)
    assert out is not None and out.extra == []  # no queue/prefill/decode times: no stage rows invented
    assert out.attributes["llmtrace.ttft_ms"] == pytest.approx(50.0) and "llmtrace.tpot_ms" not in out.attributes
    assert m.map("GET /", "server", {"http.route": "/"}, "a" * 32, "b" * 16, 0, 1) is None
    assert m.map("chat m", "client", {"llmtrace.side": "client"}, "a" * 32, "b" * 16, 0, 1) is None
    with pytest.raises(ValueError):
        Mapper("everything")


def test_chunked_body_is_read(tmp_path: object) -> None:
    """JavaScript exporters stream gzip bodies with Transfer-Encoding: chunked and no Content-Length."""
    import httpx
    from collector_helpers import count_spans, start_collector

    col = start_collector(tmp_path)  # type: ignore[arg-type]
    try:
        body = gzip.compress(_req().SerializeToString())

        def chunks():  # a generator body makes httpx send it chunked
            for i in range(0, len(body), 7):
                yield body[i:i + 7]

        r = httpx.post(col.endpoint, content=chunks(),
                       headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        assert r.status_code == 200, r.content
        col.wait_written(1)
    finally:
        col.stop()
    assert count_spans(col.db) == 1
