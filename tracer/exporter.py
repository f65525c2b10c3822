"""DuckDBSpanExporter: OpenTelemetry spans into the store, a batch per short write transaction.

Rows are built column-wise and handed to DuckDB as one Arrow table (no per-row INSERT). When the store
cannot be written (locked for too long, unwritable directory, corrupt file, size cap reached) the batch
is dropped and counted; ``export`` never raises.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from . import health
from .schema import SPAN_COLUMNS
from .store import StoreError, write_connection

_KIND_NAMES = {SpanKind.INTERNAL: "internal", SpanKind.SERVER: "server", SpanKind.CLIENT: "client",
               SpanKind.PRODUCER: "producer", SpanKind.CONSUMER: "consumer"}
_STRING = pa.string()
ARROW_SCHEMA = pa.schema(
    [(n, pa.int64() if t == "BIGINT" else pa.float64() if t == "DOUBLE" else _STRING) for n, t in SPAN_COLUMNS]
)
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode


def spans_to_arrow(spans: Sequence[ReadableSpan]) -> pa.Table:
    """Column-wise conversion; resources are serialised once per distinct resource object."""
    cols: dict[str, list[object]] = {n: [] for n, _ in SPAN_COLUMNS}
    resource_cache: dict[int, tuple[str, str | None, str | None]] = {}
    for s in spans:
        ctx = s.context
        attrs = s.attributes or {}
        res = s.resource
        cached = resource_cache.get(id(res))
        if cached is None:
            ra = dict(res.attributes) if res is not None else {}
            cached = (_dumps(ra), ra.get("service.name"), ra.get("service.version"))  # type: ignore[assignment]
            resource_cache[id(res)] = cached
        res_json, service, deploy = cached
        start = s.start_time or 0
        end = s.end_time or start
        status = s.status.status_code
        cols["trace_id"].append(f"{ctx.trace_id:032x}")
        cols["span_id"].append(f"{ctx.span_id:016x}")
        cols["parent_span_id"].append(f"{s.parent.span_id:016x}" if s.parent is not None else None)
        cols["name"].append(s.name)
        cols["kind"].append(_KIND_NAMES.get(s.kind, "internal"))
        cols["operation"].append(attrs.get("gen_ai.operation.name"))
        cols["stage"].append(attrs.get("llmtrace.stage"))
        cols["phase"].append(attrs.get("llmtrace.phase"))
        cols["service"].append(service)
        cols["deploy"].append(attrs.get("service.version", deploy))
        cols["start_ns"].append(start)
        cols["end_ns"].append(end)
        cols["duration_ms"].append((end - start) / 1e6)
        cols["status"].append(
            "cancelled" if attrs.get("llmtrace.status") == "cancelled"
            else "error" if status == StatusCode.ERROR else "ok"
        )
        cols["status_message"].append(s.status.description)
        cols["attributes"].append(_dumps(dict(attrs)))
        cols["resource"].append(res_json)
        cols["events"].append(
            _dumps([{"name": e.name, "ts": e.timestamp, "attributes": dict(e.attributes or {})} for e in s.events])
            if s.events else None
        )
    return pa.Table.from_pydict(cols, schema=ARROW_SCHEMA)


def insert_arrow(conn: object, table: pa.Table) -> None:
    conn.register("_llmtrace_batch", table)  # type: ignore[attr-defined]
    try:
        conn.execute("INSERT INTO spans SELECT * FROM _llmtrace_batch")  # type: ignore[attr-defined]
    finally:
        conn.unregister("_llmtrace_batch")  # type: ignore[attr-defined]


class DuckDBSpanExporter(SpanExporter):
    """Writes span batches into the store file; ``max_bytes`` caps the file (spans past it are dropped)."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int | None = None, lock_timeout_s: float = 30.0):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.lock_timeout_s = lock_timeout_s
        self.exported = 0
        self._shutdown = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown or not spans:
            return SpanExportResult.SUCCESS
        try:
            if self.max_bytes is not None and self.path.exists() and self.path.stat().st_size >= self.max_bytes:
                health.count("dropped_spans", len(spans),
                             f"store {self.path} reached its size cap ({self.max_bytes} bytes); spans dropped")
                return SpanExportResult.FAILURE
            table = spans_to_arrow(spans)
            with write_connection(self.path, timeout_s=self.lock_timeout_s) as conn:
                insert_arrow(conn, table)
            self.exported += len(spans)
            return SpanExportResult.SUCCESS
        except (StoreError, OSError) as exc:
            health.count("dropped_spans", len(spans), f"cannot write spans to {self.path}: {exc}")
        except Exception as exc:  # the tracer never raises into the app
            health.count("dropped_spans", len(spans), f"unexpected error writing spans to {self.path}: {exc!r}")
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._shutdown = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
