"""One bad value never costs the request: bad values are dropped per attribute, bad spans rejected per span,
and the request is answered 200 with OTLP partial success (protobuf and JSON)."""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from collector_helpers import RunningCollector, otlp_provider, query, start_collector
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
BAD_QUEUE = {7: math.nan, 30: math.inf, 61: "1e400", 62: "nan", 90: -math.inf}


@pytest.fixture(scope="module")
def col(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCollector]:
    c = start_collector(tmp_path_factory.mktemp("partial"))
    try:
        yield c
    finally:
        assert c.stop() == 0


def _vllm_span(tracer: object, i: int, run: str) -> None:
    queue = BAD_QUEUE.get(i, 0.01 * (i % 5))
    # vLLM starts its request span at the request's arrival, so the span holds the latencies it reports:
    # collect tells their unit (s here, as vLLM V0 and SGLang write them) from the span's length
    end = time.time_ns()
    s = tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=end - 200_000_000, attributes={  # type: ignore[attr-defined]
        "gen_ai.response.model": "m", "gen_ai.usage.prompt_tokens": 30, "gen_ai.usage.completion_tokens": 5,
        "gen_ai.latency.time_in_queue": queue, "gen_ai.latency.time_to_first_token": 0.05,
        "gen_ai.latency.time_in_model_prefill": 0.02, "gen_ai.latency.time_in_model_decode": 0.04,
        "run": run, "i": i})
    s.end(end_time=end)


def test_stock_exporter_vllm_spans_with_nan_inf_and_1e400_all_stored(col: RunningCollector) -> None:
    """vLLM's mapping did int(nan * 1e9): the whole request died with no response and was resent forever."""
    before = int(col.stats()["rows_written"])
    tp = otlp_provider(col.endpoint, "vllm")
    t = tp.get_tracer("vllm")
    for i in range(100):
        _vllm_span(t, i, "stock")
    tp.shutdown()
    # 100 request spans + 3 stage rows each (queue row only where the queue time is a number)
    col.wait_written(before + 100 + 100 * 3 - len(BAD_QUEUE))
    rows = query(col.db, "SELECT attributes FROM spans WHERE name = 'llm_request' "
                         "AND json_extract_string(attributes, '$.run') = 'stock'")
    assert len(rows) == 100
    by_i = {json.loads(a)["i"]: json.loads(a) for (a,) in rows}
    for i, a in by_i.items():
        if i in (7, 30, 90):  # NaN / inf doubles cannot be stored: that one attribute is left out
            assert "gen_ai.latency.time_in_queue" not in a and "llmtrace.admission.queue_wait_ms" not in a
        elif i in (61, 62):  # a string is kept as sent, but not mapped to a number
            assert a["gen_ai.latency.time_in_queue"] == BAD_QUEUE[i]
            assert "llmtrace.admission.queue_wait_ms" not in a
        else:
            assert a["llmtrace.admission.queue_wait_ms"] == pytest.approx(10.0 * (i % 5))
        assert a["llmtrace.ttft_ms"] == pytest.approx(50.0)  # the rest of the span is mapped
    (n,) = query(col.db, "SELECT count(*) FROM requests WHERE service = 'vllm'")[0]
    assert n >= 100


def _sdk_body(n: int, run: str) -> bytes:
    exp = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "raw"}))
    tp.add_span_processor(SimpleSpanProcessor(exp))
    t = tp.get_tracer("raw")
    for i in range(n):
        _vllm_span(t, i, run)
    spans = exp.get_finished_spans()
    return encode_spans(spans).SerializeToString()


def test_protobuf_partial_success_names_dropped_values_and_rejected_spans(col: RunningCollector) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest.FromString(_sdk_body(100, "pb"))
    spans = req.resource_spans[0].scope_spans[0].spans
    spans[3].start_time_unix_nano = 2**64 - 1  # past the store's range: this span is rejected
    spans[3].end_time_unix_nano = 2**64 - 1
    before = int(col.stats()["rows_written"])
    r = httpx.post(col.endpoint, content=req.SerializeToString(), headers=PB)
    assert r.status_code == 200
    ps = ExportTraceServiceResponse.FromString(r.content).partial_success
    assert ps.rejected_spans == 1 and "2262" in ps.error_message and "dropped" in ps.error_message
    col.wait_written(before + 99 * 4 - len(BAD_QUEUE))
    (n,) = query(col.db, "SELECT count(*) FROM spans WHERE name = 'llm_request' "
                         "AND json_extract_string(attributes, '$.run') = 'pb'")[0]
    assert n == 99


def _json_span(i: int, run: str, **extra: object) -> dict[str, object]:
    return {"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "op", "kind": 2,
            "startTimeUnixNano": "1780000000000000000", "endTimeUnixNano": "1780000001000000000",
            "attributes": [{"key": "run", "value": {"stringValue": run}}], **extra}


def _json_body(spans: list[dict[str, object]]) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "json-app"}}]}, "scopeSpans": [{"spans": spans}]}]}).encode()


def _nest(depth: int) -> dict[str, object]:
    v: dict[str, object] = {"stringValue": "deep"}
    for _ in range(depth):
        v = {"kvlistValue": {"values": [{"key": "k", "value": v}]}}
    return v


def test_json_bad_ids_huge_integers_and_deep_values_reject_only_their_span(col: RunningCollector) -> None:
    spans = [_json_span(i, "js") for i in range(100)]
    spans[5]["spanId"] = "zz-not-hex"
    spans[17]["attributes"].append({"key": "n", "value": {"intValue": "9" * 5000}})  # type: ignore[union-attr]
    spans[18]["attributes"].append({"key": "d", "value": {"doubleValue": 1e400}})  # type: ignore[union-attr]
    spans[40]["attributes"].append({"key": "deep", "value": _nest(150)})  # type: ignore[union-attr]
    spans[41]["attributes"].append({"key": "odd", "value": {"stringValue": "\ud800"}})  # type: ignore[union-attr]
    body = _json_body(spans).replace(b'"9999', b"9999", 1).replace(b'9"}}', b"9}}", 1)  # a bare 5000-digit number
    assert b"9" * 5000 + b"}" in body
    before = int(col.stats()["rows_written"])
    r = httpx.post(col.endpoint, content=body, headers=JS)
    assert r.status_code == 200, r.text
    ps = r.json()["partialSuccess"]
    assert ps["rejectedSpans"] == "4" and "not hex" in ps["errorMessage"], ps
    col.wait_written(before + 96)
    rows = dict(query(col.db, "SELECT span_id, attributes FROM spans "
                              "WHERE json_extract_string(attributes, '$.run') = 'js'"))
    assert len(rows) == 96
    assert {f"{i + 1:016x}" for i in (5, 17, 40, 41)}.isdisjoint(rows)
    assert json.loads(rows[f"{19:016x}"]) == {"run": "js"}  # span 18 kept, its inf double dropped


def test_bodies_that_cannot_be_read_at_all_get_an_answer(col: RunningCollector) -> None:
    cases = [b"[" * 200_000 + b"]" * 200_000, b"9" * 5000, b'{"resourceSpans": [' * 50_000,
             b'{"resourceSpans": 5}', b'{"resourceSpans": [{"scopeSpans": [7]}]}', b"\xff\xfe"]
    for body in cases:
        r = httpx.post(col.endpoint, content=body, headers=JS, timeout=10)
        assert r.status_code == 400, (body[:40], r.status_code, r.text)
        assert r.json()["message"]
    # and on a raw socket the answer is there before the connection closes
    with socket.create_connection(("127.0.0.1", col.port), timeout=10) as s:
        body = b"{" * 100_000
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert s.recv(64).startswith(b"HTTP/1.1 400")
    assert httpx.get(col.endpoint.replace("/v1/traces", "/healthz")).status_code == 200
