"""The collector's writer (the one store writer, ``storage/span_writer``) against a real store: a request the
store refuses is dropped alone, never wedging the queue behind it; and the collector's rows are the in-app
exporter's rows."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from collector_helpers import count_spans, query, start_collector
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from llmtrace.tracer.record.exporter import DuckDBSpanExporter
from llmtrace.tracer.storage.span_rows import ARROW_SCHEMA
from llmtrace.tracer.storage.span_writer import SpanWriter


def _table(n: int, seed: int, attributes: str = "{}") -> pa.Table:
    rows = [{name: None for name in ARROW_SCHEMA.names} | {
        "trace_id": f"{seed:016x}{i:016x}", "span_id": f"{seed:08x}{i:08x}", "name": "op", "kind": "internal",
        "start_ns": 1, "end_ns": 2, "duration_ms": 0.0, "status": "ok", "attributes": attributes,
        "resource": "{}"} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def test_a_refused_request_is_dropped_alone(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    w = SpanWriter(db, max_queue_bytes=64 << 20, flush_interval_s=0.5, max_batch_rows=10_000)
    # queued before the thread starts, so the three go into one batch: one bad value fails the transaction
    for table in (_table(10, 1), _table(3, 2, attributes="{not json"), _table(7, 3)):
        w.offer(table)
    w.start()
    deadline = time.monotonic() + 30
    while w.queued_rows and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.queued_rows == 0, "the queue is wedged behind a refused request"
    w.offer(_table(5, 4))  # and the writer goes on
    assert w.close(30) == 0
    assert (w.written_rows, w.refused_rows, w.dropped_rows) == (22, 3, 3)
    assert "store refused 3 spans" in (w.last_error or "")
    assert count_spans(db) == 22


def test_the_collector_and_the_in_app_exporter_store_the_same_rows(tmp_path: Path) -> None:
    """One converter: the same SDK spans, stored in-app (``DuckDBSpanExporter``) and sent by the stock OTLP
    exporter to a real ``llmtrace collect``, are the same rows in both stores, column for column."""
    col = start_collector(tmp_path)
    app_db = tmp_path / "app.duckdb"
    try:
        provider = TracerProvider(resource=Resource.create({"service.name": "svc", "service.version": "v1"}))
        provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter(app_db)))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=col.endpoint, timeout=10),
                                                       schedule_delay_millis=50))
        tracer = provider.get_tracer("t")
        for i in range(20):
            with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT, attributes={
                    "llmtrace.side": "client", "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": i,
                    "ratio": i / 7, "flag": i % 2 == 0, "models": ["a", "b"]}) as p:
                with tracer.start_as_current_span("cache.prefix_match", attributes={
                        "llmtrace.stage": "cache.prefix_match", "llmtrace.phase": "cache",
                        "service.version": "canary"}):
                    pass
                with tracer.start_as_current_span("gen.stop", attributes={
                        "llmtrace.stage": "gen.stop", "llmtrace.phase": "gen",
                        "llmtrace.status": "cancelled" if i == 3 else "done"}) as s:
                    s.add_event("first_token", {"at": i})
                if i % 5 == 0:
                    p.set_status(Status(StatusCode.ERROR, f"boom {i}"))
        provider.shutdown()  # flushes both
        col.wait_written(60)
    finally:
        assert col.stop() == 0
    columns = ("trace_id, span_id, parent_span_id, name, kind, operation, stage, phase, service, deploy, start_ns, "
               "end_ns, duration_ms, status, status_message, attributes::VARCHAR, resource::VARCHAR, events::VARCHAR")
    sql = f"SELECT {columns} FROM spans ORDER BY span_id"
    app, collected = query(app_db, sql), query(col.db, sql)
    assert len(app) == 60 and app == collected
    statuses = {r[13] for r in app}
    assert statuses == {"ok", "error", "cancelled"} and {r[9] for r in app} == {"v1", "canary"}
