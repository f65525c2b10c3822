"""One span, one row: the store's row type and the one way spans become it, whichever way they arrived.

The in-app exporter (an SDK ``ReadableSpan``, ``record/exporter.py``) and the collector (an OTLP span,
``collect/otlp_decode.py``) each read their input's fields and hand them to ``span_row``, which applies
the rules a row follows (status, deploy, stage columns, end never before start); ``rows_to_table`` turns
a batch of rows into the Arrow table ``storage/span_writer.py`` writes, repairing a value a column cannot
take in its own span only. ``json_text`` is the JSON both use for the attributes, resource and events.

Repairs and drops are counted through ``count`` (``record/health.py`` installs its counters; this layer
sits below it and must not import it). Until then they are logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.semconv import LLMTRACE_PHASE, LLMTRACE_STAGE
from llmtrace.tracer.storage import drop_count
from llmtrace.tracer.storage.views import SPAN_COLUMNS

log = logging.getLogger("llmtrace")
# repairs and drops are counted through one hook (storage/drop_count.py: set by record/health.py)
count = drop_count.count
set_counter = drop_count.set_counter


# A stored span: the ``spans`` table's columns in order, less ``duration_ms`` (computed per batch). A plain
# tuple, not a NamedTuple: building one of those costs ~4% of the exporter's whole per-span time.
ROW_FIELDS: tuple[str, ...] = tuple(n for n, _ in SPAN_COLUMNS if n != "duration_ms")
SpanRow = tuple[
    str, str, str | None, str, str,  # trace_id, span_id, parent_span_id, name, kind
    object, object, object,  # operation, stage, phase (repaired to text per batch if not str)
    str | None, str | None,  # service, deploy
    int, int,  # start_ns, end_ns
    str, str | None,  # status, status_message
    str, str, str | None,  # attributes, resource, events (JSON)
]
DEPLOY = ROW_FIELDS.index("deploy")

_STRING = pa.string()
ARROW_SCHEMA = pa.schema(
    [(n, pa.int64() if t == "BIGINT" else pa.float64() if t == "DOUBLE" else _STRING) for n, t in SPAN_COLUMNS]
)
_DURATION = ARROW_SCHEMA.get_field_index("duration_ms")
_ROW_FIELDS = [f for f in ARROW_SCHEMA if f.name != "duration_ms"]
assert tuple(f.name for f in _ROW_FIELDS) == ROW_FIELDS
_START, _END = ROW_FIELDS.index("start_ns"), ROW_FIELDS.index("end_ns")

# the span values a row's own columns come from (module names: span_row runs once a span on ingest)
_OPERATION, _STAGE, _PHASE = N.GEN_AI_OPERATION_NAME, LLMTRACE_STAGE, LLMTRACE_PHASE
_DEPLOY, _STATUS = N.SERVICE_VERSION, N.STATUS


def span_row(trace_id: str, span_id: str, parent_span_id: str | None, name: str, kind: str,
             attrs: Mapping[str, object], service: str | None, resource_deploy: object, start_ns: int, end_ns: int,
             error: bool, status_message: str | None, attributes_json: str, resource_json: str,
             events_json: str | None, labels: tuple[object, object, object] | None = None) -> SpanRow:
    """The row of one span. ``labels`` (operation, stage, phase) when a mapping decided them; otherwise they
    come from the span's own attributes. The deploy is the span's ``service.version``, else its resource's."""
    get = attrs.get
    if labels is None:
        op, stage, phase = get(_OPERATION), get(_STAGE), get(_PHASE)
    else:
        op, stage, phase = labels  # (a starred tuple in the row's display costs a third of this call)
    deploy = get(_DEPLOY, resource_deploy)
    return (
        trace_id, span_id, parent_span_id, name, kind, op, stage, phase, service,
        deploy if deploy is None or type(deploy) is str else str(deploy),
        start_ns, end_ns if end_ns >= start_ns else start_ns,
        "cancelled" if get(_STATUS) == "cancelled" else "error" if error else "ok",
        status_message, attributes_json, resource_json, events_json,
    )


def json_text(obj: object) -> str:
    """Compact JSON (orjson, ~10x the stdlib), as str: Arrow builds a string column from str several times
    faster than from UTF-8 bytes, which it validates again. A value orjson refuses (a lone surrogate, an int
    beyond 64 bits) is repaired in this value only, and counted: the JSON columns must stay valid JSON, or
    DuckDB refuses the batch."""
    try:
        return orjson.dumps(obj, default=str).decode()
    except TypeError:
        count("sanitized_values", 1, "a span value was not valid UTF-8 (lone surrogate) or beyond 64 bits; "
              "it was repaired (U+FFFD, a string) and the span kept")
        return orjson.dumps(_repaired(obj), default=lambda v: text(str(v))).decode()





def text(s: str) -> str:
    """``s`` with each lone surrogate replaced by U+FFFD (a valid pair becomes its character)."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _repaired(obj: object) -> object:
    if isinstance(obj, str):
        return text(obj)
    if isinstance(obj, bool) or obj is None or isinstance(obj, float):
        return obj
    if isinstance(obj, int):
        return obj if -(2**63) <= obj < 2**64 else str(obj)
    if isinstance(obj, Mapping):
        return {text(str(k)): _repaired(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_repaired(v) for v in obj]
    return text(str(obj))


def _cell(value: Any, type_: pa.DataType) -> object:
    """One value made to fit its column; None when it cannot be (only that value is lost, never the span)."""
    if value is None:
        return None
    if type_ == _STRING:
        return text(value if isinstance(value, str) else str(value))
    try:
        v = int(value) if type_ == pa.int64() else float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if not isinstance(v, int) or -(2**63) <= v < 2**63 else None


def warm() -> None:
    """Convert one value, so pyarrow's first ``pa.array`` of a Python list happens now. That first call imports
    pandas when it is installed (pyarrow asks whether the list is a pandas object): over a second on a busy
    2-core machine. The store writer's thread calls this as it starts, so the import overlaps the app's own
    work instead of landing on its first export, or at exit, inside ``shutdown_timeout_s``."""
    pa.array([0], type=pa.int64())


def _column(values: Sequence[object], type_: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):  # UnicodeEncodeError is a ValueError
        count("sanitized_values", 1, "a span field did not fit its column (lone surrogate, wrong type); "
              "it was repaired and the span kept")
        return pa.array([_cell(v, type_) for v in values], type=type_)


def rows_to_table(rows: Sequence[tuple[object, ...]]) -> pa.Table:
    """Rows transposed once into Arrow columns (``ARROW_SCHEMA``); ``duration_ms`` in one vectorised step."""
    columns = list(zip(*rows)) if rows else [()] * len(_ROW_FIELDS)
    arrays = [_column(c, f.type) for c, f in zip(columns, _ROW_FIELDS)]
    duration = pc.divide(pc.cast(pc.subtract(arrays[_END], arrays[_START]), pa.float64()), 1e6)
    arrays.insert(_DURATION, duration)
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)


_NEW_ONLY = """
    INSERT INTO spans
    SELECT r.* FROM (SELECT * FROM _llmtrace_batch QUALIFY row_number() OVER (PARTITION BY trace_id, span_id) = 1) r
    ANTI JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id"""


def insert_table(conn: duckdb.DuckDBPyConnection, table: pa.Table, *, skip_stored: bool = False) -> int:
    """Insert a batch on an open write connection; returns the rows inserted. ``skip_stored``: only the
    rows whose (trace_id, span_id) the store lacks, once each (a replayed log may repeat stored spans)."""
    conn.register("_llmtrace_batch", table)
    try:
        if not skip_stored:
            conn.execute("INSERT INTO spans SELECT * FROM _llmtrace_batch")
            return table.num_rows
        row = conn.execute(_NEW_ONLY).fetchone()
        return int(row[0]) if row else 0
    finally:
        try:
            conn.unregister("_llmtrace_batch")
        except duckdb.Error:  # inside a transaction an insert aborted: its error is the one to see
            pass
