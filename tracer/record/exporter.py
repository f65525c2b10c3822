"""DuckDBSpanExporter: OpenTelemetry spans into the store, a batch per short write transaction.

Rows are built column-wise and handed to DuckDB as one Arrow table (no per-row INSERT). When the store
cannot be written (locked for too long, unwritable directory, corrupt file, size cap reached) the batch
is dropped and counted; ``export`` never raises.
"""

from __future__ import annotations

import gc
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from llmtrace.tracer.record import health
from llmtrace.tracer.storage.store import StoreBusy, StoreError, write_connection
from llmtrace.tracer.storage.views import SPAN_COLUMNS

_KIND_NAMES = {SpanKind.INTERNAL: "internal", SpanKind.SERVER: "server", SpanKind.CLIENT: "client",
               SpanKind.PRODUCER: "producer", SpanKind.CONSUMER: "consumer"}
_STRING = pa.string()
ARROW_SCHEMA = pa.schema(
    [(n, pa.int64() if t == "BIGINT" else pa.float64() if t == "DOUBLE" else _STRING) for n, t in SPAN_COLUMNS]
)
_DURATION = ARROW_SCHEMA.get_field_index("duration_ms")
_START, _END = ARROW_SCHEMA.get_field_index("start_ns"), ARROW_SCHEMA.get_field_index("end_ns")
assert _START < _END < _DURATION  # the row tuples below leave duration out; it is computed from them
_ROW_FIELDS = [f for f in ARROW_SCHEMA if f.name != "duration_ms"]


def _dumps(obj: object) -> str:
    """Compact JSON (orjson, ~10x the stdlib). A value orjson refuses (a lone surrogate, an int beyond 64
    bits) is repaired in this span only: the JSON columns must stay valid JSON, or DuckDB refuses the batch."""
    try:
        return orjson.dumps(obj, default=str).decode()
    except TypeError:
        health.count("sanitized_values", 1, "a span value was not valid UTF-8 (lone surrogate) or beyond 64 bits; "
                     "it was repaired (U+FFFD, a string) and the span kept")
        return orjson.dumps(_repaired(obj), default=lambda v: _text(str(v))).decode()


def _text(s: str) -> str:
    """``s`` with each lone surrogate replaced by U+FFFD (a valid pair becomes its character)."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _repaired(obj: object) -> object:
    if isinstance(obj, str):
        return _text(obj)
    if isinstance(obj, bool) or obj is None or isinstance(obj, float):
        return obj
    if isinstance(obj, int):
        return obj if -(2**63) <= obj < 2**64 else str(obj)
    if isinstance(obj, Mapping):
        return {_text(str(k)): _repaired(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_repaired(v) for v in obj]
    return _text(str(obj))


def _cell(value: object, type_: pa.DataType) -> object:
    """One value made to fit its column; None when it cannot be (only that value is lost, never the span)."""
    if value is None:
        return None
    if type_ == _STRING:
        return _text(value if isinstance(value, str) else str(value))
    try:
        v = int(value) if type_ == pa.int64() else float(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return v if not isinstance(v, int) or -(2**63) <= v < 2**63 else None


def _column(values: Sequence[object], type_: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):  # UnicodeEncodeError is a ValueError
        health.count("sanitized_values", 1, "a span field did not fit its column (lone surrogate, wrong type); "
                     "it was repaired and the span kept")
        return pa.array([_cell(v, type_) for v in values], type=type_)


def spans_to_arrow(spans: Sequence[ReadableSpan]) -> pa.Table:
    """Rows as tuples, transposed once into columns; resources serialised once per distinct resource.

    The cyclic garbage collector is paused for the loop: building tens of thousands of small tuples
    otherwise triggers collections that walk the app's whole heap, which cost more than the conversion.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _spans_to_arrow(spans)
    finally:
        if was_enabled:
            gc.enable()


def _spans_to_arrow(spans: Sequence[ReadableSpan]) -> pa.Table:
    resource_cache: dict[int, tuple[str, str | None, str | None]] = {}
    hex_ids: dict[int, str] = {}  # a pass's ~40 spans share its trace id and parent: format each once
    rows: list[tuple[object, ...]] = []
    append = rows.append
    error = StatusCode.ERROR
    for s in spans:
        # ReadableSpan's public API only (issue 15). Its attributes are a read-only view; orjson needs a
        # dict, and the view's copy() (the SDK's BoundedAttributes.copy: a dict) is 10x dict(view).
        ctx = s.context
        attrs = s.attributes.copy()  # type: ignore[union-attr]
        if type(attrs) is not dict:
            attrs = dict(attrs)
        res = s.resource
        cached = resource_cache.get(id(res))
        if cached is None:
            ra = dict(res.attributes) if res is not None else {}
            cached = (_dumps(ra), ra.get("service.name"), ra.get("service.version"))  # type: ignore[assignment]
            resource_cache[id(res)] = cached
        res_json, service, deploy = cached
        start = s.start_time or 0
        end = s.end_time or start
        status = s.status
        parent = s.parent
        get = attrs.get
        events = s.events
        trace_hex = hex_ids.get(ctx.trace_id)
        if trace_hex is None:
            trace_hex = hex_ids[ctx.trace_id] = ctx.trace_id.to_bytes(16, "big").hex()
        parent_hex = None
        if parent is not None:
            parent_hex = hex_ids.get(parent.span_id)
            if parent_hex is None:
                parent_hex = hex_ids[parent.span_id] = parent.span_id.to_bytes(8, "big").hex()
        append((
            trace_hex,
            ctx.span_id.to_bytes(8, "big").hex(),  # 2x f"{:016x}"
            parent_hex,
            s.name,
            _KIND_NAMES.get(s.kind, "internal"),
            get("gen_ai.operation.name"),
            get("llmtrace.stage"),
            get("llmtrace.phase"),
            service,
            get("service.version", deploy),
            start,
            end,
            "cancelled" if get("llmtrace.status") == "cancelled"
            else "error" if status.status_code is error else "ok",
            status.description,
            _dumps(attrs),
            res_json,
            _dumps([{"name": e.name, "ts": e.timestamp, "attributes": dict(e.attributes or {})} for e in events])
            if events else None,
        ))
    columns = list(zip(*rows)) if rows else [()] * (len(SPAN_COLUMNS) - 1)
    arrays = [_column(c, f.type) for c, f in zip(columns, _ROW_FIELDS)]
    # duration_ms in one vectorised step instead of a float per row
    duration = pc.divide(pc.cast(pc.subtract(arrays[_END], arrays[_START]), pa.float64()), 1e6)
    arrays.insert(_DURATION, duration)
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)


def insert_arrow(conn: object, table: pa.Table) -> None:
    conn.register("_llmtrace_batch", table)  # type: ignore[attr-defined]
    try:
        conn.execute("INSERT INTO spans SELECT * FROM _llmtrace_batch")  # type: ignore[attr-defined]
    finally:
        conn.unregister("_llmtrace_batch")  # type: ignore[attr-defined]


class DuckDBSpanExporter(SpanExporter):
    """Writes span batches into the store file; ``max_bytes`` caps the file (spans past it are dropped).

    Conversion to Arrow runs on the caller's (the processor's) thread and the DuckDB write on a writer
    thread of its own, so one batch is converted while the previous one commits (DuckDB releases the GIL
    while it writes). At most two converted batches wait, which bounds memory and pushes back on the
    processor, whose own queue is bounded and counted.

    While another process holds the store, a batch is retried for ``lock_timeout_s`` in short attempts,
    so a shutdown deadline (``set_deadline``) is seen within ~0.25 s: past it, every batch still waiting
    is dropped and counted, and the writer thread has ended before ``shutdown`` returns (a thread inside
    DuckDB while the interpreter finalizes aborts the process).
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int | None = None, lock_timeout_s: float = 30.0):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.lock_timeout_s = lock_timeout_s
        self.exported = 0
        self.dropped = 0  # spans this exporter could not store (also in health.counters()['dropped_spans'])
        self._shutdown = False
        self._stopping = False
        self._deadline: float | None = None  # time.monotonic() past which nothing waits any more
        self._tables: queue.Queue[pa.Table] = queue.Queue(maxsize=2)
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._count_lock = threading.Lock()

    def set_deadline(self, deadline: float) -> None:
        """From now on nothing waits past ``deadline`` (a ``time.monotonic()`` value): shutdown is near."""
        self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _drop(self, n: int, message: str | None) -> None:
        with self._count_lock:
            self.dropped += n
        # Drops near the shutdown deadline are reported once, with the total, by ``llmtrace.shutdown``.
        health.count("dropped_spans", n, None if self._deadline is not None else message)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        if self._shutdown or self._past_deadline():
            self._drop(len(spans), f"store exporter for {self.path} is shut down; spans dropped")
            return SpanExportResult.FAILURE
        try:
            table = spans_to_arrow(spans)
        except Exception as exc:  # the tracer never raises into the app
            self._drop(len(spans), f"cannot convert spans for {self.path}: {exc!r}")
            return SpanExportResult.FAILURE
        self._ensure_writer()
        while True:
            try:
                self._tables.put(table, timeout=0.1)
                return SpanExportResult.SUCCESS
            except queue.Full:
                if self._past_deadline() or self._writer is None or not self._writer.is_alive():
                    self._drop(table.num_rows, f"store writer for {self.path} is not keeping up; spans dropped")
                    return SpanExportResult.FAILURE

    def _ensure_writer(self) -> None:
        with self._writer_lock:
            if (self._writer is None or not self._writer.is_alive()) and not self._stopping:
                self._writer = threading.Thread(target=self._write_loop, name="llmtrace-store-writer", daemon=True)
                self._writer.start()

    def _write_loop(self) -> None:
        while True:
            try:
                table = self._tables.get(timeout=0.1)
            except queue.Empty:
                if self._stopping:
                    return
                continue
            try:
                self._write(table)
            finally:
                self._tables.task_done()

    def _write(self, table: pa.Table) -> None:
        n = table.num_rows
        try:
            if self.max_bytes is not None and self.path.exists() and self.path.stat().st_size >= self.max_bytes:
                self._drop(n, f"store {self.path} reached its size cap ({self.max_bytes} bytes); spans dropped")
                return
            give_up = time.monotonic() + self.lock_timeout_s
            while True:
                limit = give_up if self._deadline is None else min(give_up, self._deadline)
                try:
                    # Short attempts, so a deadline set meanwhile is seen at once.
                    with write_connection(self.path, timeout_s=max(0.0, min(0.25, limit - time.monotonic()))) as conn:
                        insert_arrow(conn, table)
                    break
                except StoreBusy:
                    if time.monotonic() >= (give_up if self._deadline is None else min(give_up, self._deadline)):
                        raise
            self.exported += n
        except StoreBusy:
            self._drop(n, f"cannot write spans to {self.path}: it stayed locked by another process "
                          f"for {self.lock_timeout_s:.0f}s; spans dropped")
        except (StoreError, OSError) as exc:
            self._drop(n, f"cannot write spans to {self.path}: {exc}")
        except Exception as exc:  # the tracer never raises into the app
            self._drop(n, f"unexpected error writing spans to {self.path}: {exc!r}")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every converted batch is committed (or dropped and counted)."""
        timeout = timeout_millis / 1000
        if self._deadline is not None:
            timeout = max(0.0, min(timeout, self._deadline - time.monotonic()))
        done = self._tables.all_tasks_done
        with done:
            return done.wait_for(lambda: self._tables.unfinished_tasks == 0, timeout=timeout)

    def shutdown(self) -> None:
        """Flush until the deadline (30 s when none was set), then stop the writer and count what is left."""
        if self._shutdown:
            return
        if self._deadline is None:
            self.set_deadline(time.monotonic() + 30.0)
        self.force_flush()
        self._shutdown = True
        self._stopping = True
        writer = self._writer
        if writer is not None:
            # Past the deadline a batch is dropped within one short lock attempt; an INSERT under way is
            # let finish (bounded grace), since a thread inside DuckDB at interpreter exit aborts it.
            writer.join(timeout=max(0.0, self._deadline - time.monotonic()) + 2.0)  # type: ignore[operator]
        while True:
            try:
                table = self._tables.get_nowait()
            except queue.Empty:
                break
            self._drop(table.num_rows, None)
            self._tables.task_done()
