"""The writer thread against a real store: a request the store refuses is dropped alone, never wedging
the queue behind it."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from collector_helpers import count_spans

from llmtrace.tracer.collect.writer import SpanWriter
from llmtrace.tracer.record.exporter import ARROW_SCHEMA
from llmtrace.tracer.storage.retention import RetentionPolicy


def _table(n: int, seed: int, attributes: str = "{}") -> pa.Table:
    rows = [{name: None for name in ARROW_SCHEMA.names} | {
        "trace_id": f"{seed:016x}{i:016x}", "span_id": f"{seed:08x}{i:08x}", "name": "op", "kind": "internal",
        "start_ns": 1, "end_ns": 2, "duration_ms": 0.0, "status": "ok", "attributes": attributes,
        "resource": "{}"} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def test_a_refused_request_is_dropped_alone(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    w = SpanWriter(db, max_queue_bytes=64 << 20, flush_interval_s=0.5, max_batch_rows=10_000, lock_timeout_s=5,
                   retention=RetentionPolicy(), retention_interval_s=60)
    # queued before the thread starts, so the three go into one batch: one bad value fails the transaction
    assert w.offer(_table(10, 1)) and w.offer(_table(3, 2, attributes="{not json")) and w.offer(_table(7, 3))
    w.start()
    deadline = time.monotonic() + 30
    while w.queued_rows and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.queued_rows == 0, "the queue is wedged behind a refused request"
    assert w.offer(_table(5, 4))  # and the writer goes on
    assert w.close(30) == 0
    assert (w.written_rows, w.refused_rows) == (22, 3)
    assert "store refused 3 spans" in (w.last_error or "")
    assert count_spans(db) == 22
