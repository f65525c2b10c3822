"""DuckDBSpanExporter: OpenTelemetry spans into the store, through the one store writer.

Each span is read through ``ReadableSpan``'s public API into the store's row (``storage/span_rows``, the
same rows the collector makes of OTLP spans); a batch becomes one Arrow table on the caller's (the
processor's) thread and goes to a ``storage/span_writer.SpanWriter``, whose thread commits it while the
next batch is converted. The writer's loss policy is the collector's: a locked store is retried, the
queue is bounded in bytes and the oldest batches go first at the cap, every drop is counted
(``health.counters()``) and warned about once. ``export`` never blocks on the store and never raises.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from llmtrace.tracer.record import health
from llmtrace.tracer.record.processor import SHUTDOWN_GRACE_S
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.storage.span_rows import (
    ARROW_SCHEMA,
    SpanRow,
    insert_table,
    json_text,
    rows_to_table,
    span_row,
)
from llmtrace.tracer.storage.span_writer import SpanWriter

__all__ = ["ARROW_SCHEMA", "DuckDBSpanExporter", "insert_arrow", "spans_to_arrow", "spans_to_rows"]
insert_arrow = insert_table  # the name tests and tools have used

_KIND_NAMES = {SpanKind.INTERNAL: "internal", SpanKind.SERVER: "server", SpanKind.CLIENT: "client",
               SpanKind.PRODUCER: "producer", SpanKind.CONSUMER: "consumer"}


def spans_to_arrow(spans: Sequence[ReadableSpan]) -> pa.Table:
    """The spans' rows as one Arrow table (``ARROW_SCHEMA``).

    The cyclic garbage collector is paused for the loop: building tens of thousands of small tuples
    otherwise triggers collections that walk the app's whole heap, which cost more than the conversion.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return rows_to_table(spans_to_rows(spans))
    finally:
        if was_enabled:
            gc.enable()


def spans_to_rows(spans: Sequence[ReadableSpan]) -> list[SpanRow]:
    """One ``SpanRow`` a span; resources serialised once per distinct resource, ids formatted once."""
    resource_cache: dict[int, tuple[str, str | None, object]] = {}
    hex_ids: dict[int, str] = {}  # a pass's ~40 spans share its trace id and parent: format each once
    rows: list[SpanRow] = []
    append = rows.append
    error = StatusCode.ERROR
    kinds = _KIND_NAMES
    row = span_row
    dumps = json_text
    for s in spans:
        # ReadableSpan's public API only (issue 15). Its attributes are a read-only view; orjson needs a
        # dict, and the view's copy() (the SDK's BoundedAttributes.copy: a dict) is 10x dict(view).
        ctx: SpanContext = s.context  # a finished span has one
        attrs = s.attributes.copy()  # type: ignore[union-attr]
        if type(attrs) is not dict:
            attrs = dict(attrs)
        res = s.resource
        cached = resource_cache.get(id(res))
        if cached is None:
            ra = dict(res.attributes) if res is not None else {}
            service = ra.get(sc.SERVICE_NAME)
            cached = (dumps(ra), None if service is None else str(service), ra.get(N.SERVICE_VERSION))
            resource_cache[id(res)] = cached
        res_json, service, deploy = cached
        start = s.start_time or 0
        status = s.status
        parent = s.parent
        events = s.events
        trace_hex = hex_ids.get(ctx.trace_id)
        if trace_hex is None:
            trace_hex = hex_ids[ctx.trace_id] = ctx.trace_id.to_bytes(16, "big").hex()
        parent_hex = None
        if parent is not None:
            parent_hex = hex_ids.get(parent.span_id)
            if parent_hex is None:
                parent_hex = hex_ids[parent.span_id] = parent.span_id.to_bytes(8, "big").hex()
        append(row(
            trace_hex, ctx.span_id.to_bytes(8, "big").hex(), parent_hex,  # 2x f"{:016x}"
            s.name, kinds.get(s.kind, "internal"), attrs, service, deploy, start, s.end_time or start,
            status.status_code is error, status.description, dumps(attrs), res_json,
            dumps([{"name": e.name, "ts": e.timestamp, "attributes": dict(e.attributes or {})} for e in events])
            if events else None,
        ))
    return rows


class DuckDBSpanExporter(SpanExporter):
    """Writes span batches into the store file through a ``SpanWriter``; ``max_bytes`` caps the file
    (past it, batches are dropped and counted: the store is full). ``max_queue_bytes`` bounds what
    waits for the store (the oldest batches are dropped past it).

    Conversion to Arrow runs on the caller's (the processor's) thread and the DuckDB write on the
    writer's thread, so one batch is converted while the previous one commits (DuckDB releases the GIL
    while it writes). While another process holds the store the writer retries in short attempts, so a
    shutdown deadline (``set_deadline``) is seen within ~0.15 s: past it, every batch still waiting is
    dropped and counted, and the writer thread has ended before ``shutdown`` returns (a thread inside
    DuckDB while the interpreter finalizes aborts the process).
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int | None = None,
                 max_queue_bytes: int = 256 << 20, lock_timeout_s: float | None = None) -> None:
        # lock_timeout_s is accepted for older callers and no longer used: a locked store is waited for
        # as long as the queue has room; the cap (oldest dropped) and the shutdown deadline bound it.
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._shutdown = False
        self._deadline: float | None = None
        self._dropped_here = 0  # refused before reaching the writer (shut down, not convertible)
        self.writer = SpanWriter(self.path, max_queue_bytes=max_queue_bytes, max_store_bytes=max_bytes)
        self.writer.start()

    @property
    def exported(self) -> int:
        return self.writer.written_rows

    @property
    def dropped(self) -> int:
        """Spans this exporter could not store (also in ``health.counters()['dropped_spans']``)."""
        return self.writer.dropped_rows + self._dropped_here

    def set_deadline(self, deadline: float) -> None:
        """From now on nothing waits past ``deadline`` (a ``time.monotonic()`` value): shutdown is near."""
        self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
        self.writer.set_deadline(self._deadline)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _drop(self, n: int, why: str, message: str) -> None:
        self._dropped_here += n
        # Drops near the shutdown deadline are reported once, with the total, by ``llmtrace.shutdown``.
        quiet = self._deadline is not None
        health.count("dropped_spans", n, None)
        health.count(f"dropped_spans_{why}", n, None if quiet else message)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        if self._shutdown or self._past_deadline():
            self._drop(len(spans), "closed", f"store exporter for {self.path} is shut down; spans dropped")
            return SpanExportResult.FAILURE
        try:
            table = spans_to_arrow(spans)
        except Exception as exc:  # the tracer never raises into the app
            self._drop(len(spans), "unconvertible", f"cannot convert spans for {self.path}: {exc!r}")
            return SpanExportResult.FAILURE
        if self._shutdown:
            # Shut down while this batch converted (a starved machine): the processor that gave up waiting
            # for it has counted it with its shutdown total (processor.py); counting it again would double it.
            return SpanExportResult.FAILURE
        self.writer.offer(table)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every converted batch is committed (or dropped and counted)."""
        return self.writer.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Flush until the deadline (30 s when none was set), then stop the writer and count what is left."""
        if self._shutdown:
            return
        if self._deadline is None:
            self.set_deadline(time.monotonic() + 30.0)
        self.force_flush()
        self._shutdown = True
        # Past the deadline no lock attempt starts; an INSERT under way is let finish (bounded grace),
        # since a thread inside DuckDB at interpreter exit aborts it.
        deadline = self._deadline if self._deadline is not None else time.monotonic()
        self.writer.close(max(0.0, deadline + SHUTDOWN_GRACE_S - time.monotonic()))
        self.writer.drop_queued()
