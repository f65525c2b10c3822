"""What the collector answers to bad, oversized, unauthorised and too many requests, and that it loses nothing."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import duckdb
import httpx
from collector_helpers import RunningCollector, count_spans, otlp_provider, query, start_collector
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1 import trace_pb2

PB = {"Content-Type": "application/x-protobuf"}


def _request(n: int, seed: int = 0, *, bad_ids: int = 0) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "raw"
    ss = rs.scope_spans.add()
    for i in range(n):
        s = ss.spans.add()
        s.trace_id = (seed * 1_000_000 + i + 1).to_bytes(16, "big")
        s.span_id = (seed * 1_000_000 + i + 1).to_bytes(8, "big")
        s.name = f"op{i}"
        s.kind = trace_pb2.Span.SPAN_KIND_SERVER
        s.start_time_unix_nano = time.time_ns()
        s.end_time_unix_nano = s.start_time_unix_nano + 1000
        a = s.attributes.add()
        a.key, a.value.string_value = "payload", "x" * 200
    for _ in range(bad_ids):
        s = ss.spans.add()
        s.trace_id, s.span_id, s.name = b"\x01\x02\x03", b"\x01" * 8, "bad"
    return req


def _message(r: httpx.Response) -> str:
    if r.headers["content-type"].startswith("application/json"):
        return str(r.json()["message"])
    return r.content.decode("utf-8", "replace")


def test_bad_bodies_are_400_with_a_reason(tmp_path: Path) -> None:
    col = start_collector(tmp_path)
    try:
        url = col.endpoint
        r = httpx.post(url, content=b"\x0a\xff\xff\xff\xff\x0f\x01", headers=PB)
        assert r.status_code == 400 and "malformed protobuf" in _message(r)
        r = httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "malformed JSON" in r.json()["message"]
        r = httpx.post(url, content=b'{"resourceSpans": "nope"}', headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "not an OTLP" in r.json()["message"]
        r = httpx.post(url, content=b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
                       headers={"Content-Type": "application/json"})
        # one bad hex id rejects that span, not the request (OTLP partial success, as the docs promise)
        assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "1"
        assert "not hex" in r.json()["partialSuccess"]["errorMessage"]
        r = httpx.post(url, content=b"definitely not gzip", headers={**PB, "Content-Encoding": "gzip"})
        assert r.status_code == 400 and "gzip" in _message(r)
        r = httpx.post(url, content=b"", headers={"Content-Type": "text/plain"})
        assert r.status_code == 400 and "Content-Type" in _message(r)
        assert httpx.post(url.replace("/v1/traces", "/v1/metrics"), content=b"", headers=PB).status_code == 404
        # invalid ids: the good spans are kept, the bad ones reported through OTLP partial success
        r = httpx.post(url, content=_request(3, bad_ids=2).SerializeToString(), headers=PB)
        assert r.status_code == 200
        resp = ExportTraceServiceResponse.FromString(r.content)
        assert resp.partial_success.rejected_spans == 2 and "trace_id" in resp.partial_success.error_message
        col.wait_written(3)
        assert col.process.poll() is None
    finally:
        col.stop()
    assert count_spans(col.db) == 3


def test_oversized_bodies_are_413(tmp_path: Path) -> None:
    col = start_collector(tmp_path, "--max-body", "1MB")
    try:
        r = httpx.post(col.endpoint, content=b"\0" * (2 << 20), headers=PB, timeout=60)
        assert r.status_code == 413 and "limit" in _message(r)
        bomb = gzip.compress(b"\0" * (100 << 20), compresslevel=9)  # ~100 KB on the wire, 100 MB inflated
        assert len(bomb) < 1 << 20
        r = httpx.post(col.endpoint, content=bomb, headers={**PB, "Content-Encoding": "gzip"}, timeout=60)
        assert r.status_code == 413 and "decompressed" in _message(r)
        ok = httpx.post(col.endpoint, content=_request(5).SerializeToString(), headers=PB, timeout=60)
        assert ok.status_code == 200
    finally:
        col.stop()


def test_token(tmp_path: Path) -> None:
    col = start_collector(tmp_path, "--token", "s3cret")
    try:
        body = _request(2).SerializeToString()
        r = httpx.post(col.endpoint, content=body, headers=PB, timeout=60)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        r = httpx.post(col.endpoint, content=body, headers={**PB, "Authorization": "Bearer wrong"}, timeout=60)
        assert r.status_code == 401
        tp = otlp_provider(col.endpoint, "authed", headers={"Authorization": "Bearer s3cret"})
        tp.get_tracer("t").start_span("fine").end()
        tp.shutdown()
        col.wait_written(1)
    finally:
        col.stop()
    assert query(col.db, "SELECT name, service FROM spans") == [("fine", "authed")]


def _send_until_refused(col: RunningCollector, limit_s: float = 30.0) -> tuple[int, httpx.Response]:
    accepted = 0
    seed = 0
    deadline = time.monotonic() + limit_s
    with httpx.Client() as client:
        while time.monotonic() < deadline:
            seed += 1
            r = client.post(col.endpoint, content=_request(512, seed).SerializeToString(), headers=PB)
            if r.status_code != 200:
                return accepted, r
            accepted += 512
    raise AssertionError(f"collector accepted {accepted} spans without pushing back")


def test_overload_pushes_back_with_bounded_memory_and_loses_nothing(tmp_path: Path) -> None:
    col = start_collector(tmp_path, "--queue", "4MB")
    holder = duckdb.connect(str(col.db))  # another process holding the store: the writer cannot commit
    try:
        accepted, refused = _send_until_refused(col)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "queue is full" in _message(refused)
        stats = col.stats()
        assert stats["rows_written"] == 0 and stats["rows_queued"] == accepted
        assert 0 < accepted < 20_000  # 4 MB of Arrow is a few thousand of these spans, not an unbounded queue
    finally:
        holder.close()
    try:
        col.wait_written(accepted)
        # once the store is free again, the same client gets through
        r = httpx.post(col.endpoint, content=_request(10, 99_999).SerializeToString(), headers=PB, timeout=60)
        assert r.status_code == 200
        col.wait_written(accepted + 10)
    finally:
        assert col.stop() == 0
    assert count_spans(col.db) == accepted + 10
    assert f"stopped; {accepted + 10} spans accepted, {accepted + 10} rows written" in col.log()
