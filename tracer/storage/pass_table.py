"""One row per logical pass, kept by the store's writer: ``llmtrace_passes`` (the ``passes`` view's columns).

The analyzers read every pass on each ``diagnose``/``check``; built from the spans that is a JSON parse of
every pass span and a join of the client and server sides (most of a diagnose on a big store). The writer
(tracer/storage/span_writer.py, for the collector and the in-app exporter alike) keeps the table instead,
in the transaction of each batch's spans: the traces the batch brings pass spans for are written down in
``llmtrace_passes_dirty`` (they wait), and at most every ``FOLD_S`` seconds the waiting traces' passes are
deleted and built again from the store's pass spans of those traces (a pass joins a client span and the
server span under it, which may come in different batches, and takes the trace's deploy; so a trace is
built whole, never a pass alone). Building passes plans a large query (about 0.1 s, whatever the batch
size): once a batch it would cost the collector more than its inserts, once a fold it costs a few percent.
A reader takes the kept passes of the other traces plus the waiting traces' passes built from their spans
(``kept_relation``), so it never reads a stale pass.

Whether the table may be trusted is written beside it: ``llmtrace_meta['passes_table']`` holds the schema
version, the number of spans and the sum of a hash of every pass span's columns it was kept for (moved on
by each batch's own pass spans, so the writer never rescans the store for it). Any write that did not keep
the table (an older llmtrace, retention run on its own, a replayed log, an UPDATE of a deploy by hand)
leaves the stamp behind the store's fingerprint: readers then build passes from the spans as before
(tracer/storage/store.py ``bind_pass_table``), and the writer rebuilds the table whole at the next batch
that notices (it compares the count each batch and the whole fingerprint every ``VERIFY_S``).
"""
from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from llmtrace.tracer.settings import env
from llmtrace.tracer.storage.views import (
    PASS_OPERATIONS,
    SCHEMA_VERSION,
    passes_from_spans,
)

PASSES_TABLE = "llmtrace_passes"
META_KEY = "passes_table"
# LLMTRACE_PASS_TABLE=0: writers leave the table alone (benchmarks/collector.py measures its cost so)
ENV = "LLMTRACE_PASS_TABLE"


def enabled() -> bool:
    return (env(ENV) or "1").lower() not in ("0", "false", "no", "off")


# What a pass row is made of: a pass span's columns (a hand-made UPDATE of a deploy changes this)
_PASS_SPAN_HASH = ("hash(trace_id, span_id, parent_span_id, service, deploy, start_ns, end_ns, status, operation, "
                   "CAST(attributes AS VARCHAR))")


def _pass_span_sum(conn: duckdb.DuckDBPyConnection, source: str) -> int:
    rows = conn.execute(f"SELECT coalesce(sum({_PASS_SPAN_HASH}), 0) FROM {source} "
                        f"WHERE operation IN {PASS_OPERATIONS}").fetchall()  # (DuckDB 2 keeps a result open after fetchone)
    return int(rows[0][0]) if rows else 0


def _count(conn: duckdb.DuckDBPyConnection) -> int:
    rows = conn.execute("SELECT count(*) FROM spans").fetchall()
    return int(rows[0][0]) if rows else 0


def fingerprint(conn: duckdb.DuckDBPyConnection) -> str:
    """The store's spans as the stamp describes them: schema version, span count, and the sum of a hash of
    every pass span's columns (the only rows passes are made of). One scan of the pass spans."""
    return f"{SCHEMA_VERSION}:{_count(conn)}:{_pass_span_sum(conn, 'spans')}"


def _stamp(conn: duckdb.DuckDBPyConnection) -> list[str] | None:
    try:
        rows = conn.execute("SELECT value FROM llmtrace_meta WHERE key = ?", [META_KEY]).fetchall()
    except duckdb.CatalogException:  # a store without the meta table
        return None
    parts = str(rows[0][0]).split(":") if rows else []
    return parts if len(parts) == 3 else None


def is_current(conn: duckdb.DuckDBPyConnection, full: bool = True) -> bool:
    """Whether ``llmtrace_passes`` (with the waiting traces) holds the passes of exactly the spans the store
    holds: the stamp equals the store's fingerprint. ``full=False`` (the writer between its own batches)
    compares the version and span count only, which a write past the writer changes."""
    parts = _stamp(conn)
    if parts is None:
        return False
    if not full:
        return parts[:2] == [str(SCHEMA_VERSION), str(_count(conn))]
    return ":".join(parts) == fingerprint(conn)


DIRTY_TABLE = "llmtrace_passes_dirty"  # traces whose kept passes wait to be built again
FOLD_S = 5.0  # a writer builds the waiting traces' passes at most this often (each build plans a large query)
VERIFY_S = 60.0  # and checks the whole stamp (a scan of the pass spans) at its first batch and this often


def _select(spans: str) -> str:
    return f"SELECT * FROM {passes_from_spans(spans)}"


def _has_table(conn: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND NOT temporary",
                             [name]).fetchall()[0][0])


def rebuild(conn: duckdb.DuckDBPyConnection) -> None:
    """The table from every span in the store, and the stamp (inside the caller's transaction)."""
    conn.execute(f"CREATE OR REPLACE TABLE {PASSES_TABLE} AS {_select('spans')}")
    conn.execute(f"CREATE OR REPLACE TABLE {DIRTY_TABLE} (trace_id VARCHAR, first_ns BIGINT)")
    _set_stamp(conn, fingerprint(conn))


def _waiting_start(conn: duckdb.DuckDBPyConnection) -> int | None:
    """Where the waiting traces' pass spans start: the earliest of their new spans and of their passes already
    kept (a kept pass starts at its earliest pass span); None when no trace waits. Spans are stored about
    in time order, so this range skips the row groups of everything older instead of reading every span's
    trace id."""
    rows = conn.execute(f"""SELECT min(x) FROM (
        SELECT min(first_ns) AS x FROM {DIRTY_TABLE}
        UNION ALL SELECT min(start_ns) FROM {PASSES_TABLE} WHERE trace_id IN (SELECT trace_id FROM {DIRTY_TABLE}))
        """).fetchall()
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def _waiting_passes(lo: int) -> str:
    spans = (f"(SELECT * FROM spans WHERE start_ns >= {lo} AND operation IN {PASS_OPERATIONS} "
             f"AND trace_id IN (SELECT trace_id FROM {DIRTY_TABLE}))")
    return _select(spans)


@dataclass(slots=True)
class PassKeeper:
    """One writer's upkeep of the table. Each batch, in its transaction: the traces it brings pass spans for
    are written down as waiting (one cheap insert) and the stamp moves on; at most every ``fold_s`` the
    waiting traces' passes are built again from the store and replace theirs (a pass joins a client span
    and the server span under it, which may come in different batches, and takes the trace's deploy, so a
    trace is built whole). Readers see the kept passes of the other traces plus the waiting traces' passes
    built from their spans (``kept_relation``): never a stale pass, and the large query is planned once a
    fold instead of once a batch."""

    fold_s: float = FOLD_S
    verify_s: float = VERIFY_S
    _next_fold: float = 0.0
    _next_verify: float = 0.0

    def is_current(self, conn: duckdb.DuckDBPyConnection, now: float) -> bool:
        """Before a batch: the full fingerprint at the first batch and every ``verify_s`` (an edit past the
        writers, such as an UPDATE of a deploy, keeps the count), the count in between."""
        full = now >= self._next_verify
        if full:
            self._next_verify = now + self.verify_s
        return is_current(conn, full=full)

    def after_insert(self, conn: duckdb.DuckDBPyConnection, table: pa.Table, was_current: bool, now: float) -> None:
        if not was_current or not _has_table(conn, DIRTY_TABLE):
            rebuild(conn)
            self._next_fold = now + self.fold_s
            return
        parts = _stamp(conn)
        added = 0
        if table.num_rows and "operation" in table.column_names:
            conn.register("_llmtrace_pass_batch", table)
            try:
                conn.execute(f"INSERT INTO {DIRTY_TABLE} SELECT trace_id, min(start_ns) FROM _llmtrace_pass_batch "
                             f"WHERE operation IN {PASS_OPERATIONS} GROUP BY trace_id")
                added = _pass_span_sum(conn, "_llmtrace_pass_batch")
            finally:
                _unregister(conn, "_llmtrace_pass_batch")
        if now >= self._next_fold:
            fold(conn)
            self._next_fold = now + self.fold_s
        # the stamp moves on by the batch alone: no scan of the store's pass spans a batch
        total = (int(parts[2]) if parts else 0) + added
        _set_stamp(conn, f"{SCHEMA_VERSION}:{_count(conn)}:{total}")

    def after_retention(self, conn: duckdb.DuckDBPyConnection, was_current: bool) -> None:
        """Retention deleted whole traces (tracer/storage/retention.py): their passes go too."""
        if not was_current or not _has_table(conn, DIRTY_TABLE):
            rebuild(conn)
            return
        conn.execute(f"DELETE FROM {PASSES_TABLE} WHERE trace_id NOT IN "
                     f"(SELECT DISTINCT trace_id FROM spans WHERE operation IN {PASS_OPERATIONS})")
        _set_stamp(conn, fingerprint(conn))


def pass_span_sum(conn: duckdb.DuckDBPyConnection, source: str) -> int:
    """The stamp's sum over the pass spans of ``source`` (a relation over the spans' columns)."""
    return _pass_span_sum(conn, source)


def rewritten(conn: duckdb.DuckDBPyConnection, traces: str, delta: int, deleted: int) -> None:
    """A writer that keeps the table rewrote spans in place, in its transaction (the collector's join by
    response id, tracer/collect/otlp_join.py): ``traces`` (a query of trace id, earliest start of their pass
    spans) wait to be built again, and the stamp moves by what the rewrite changed (``delta``: the pass-span
    sum after less before; ``deleted`` spans gone), so a current table stays current and a stale one stale."""
    parts = _stamp(conn)
    if parts is None or not _has_table(conn, DIRTY_TABLE):
        return
    conn.execute(f"INSERT INTO {DIRTY_TABLE} {traces}")
    _set_stamp(conn, f"{parts[0]}:{int(parts[1]) - deleted}:{int(parts[2]) + delta}")


def fold(conn: duckdb.DuckDBPyConnection) -> None:
    """The waiting traces' passes built again from the store, in place of theirs (caller's transaction)."""
    lo = _waiting_start(conn)
    if lo is None:
        return
    conn.execute(f"DELETE FROM {PASSES_TABLE} WHERE trace_id IN (SELECT trace_id FROM {DIRTY_TABLE})")
    conn.execute(f"INSERT INTO {PASSES_TABLE} {_waiting_passes(lo)}")
    conn.execute(f"DELETE FROM {DIRTY_TABLE}")


def kept_relation(conn: duckdb.DuckDBPyConnection) -> str | None:
    """What a reader reads as the store's passes: the table, or, while traces wait for the next fold, the
    table without them plus their passes built from their spans; None when the table is not current."""
    if not is_current(conn) or not _has_table(conn, DIRTY_TABLE):
        return None
    lo = _waiting_start(conn)
    if lo is None:
        return PASSES_TABLE
    return (f"(SELECT * FROM {PASSES_TABLE} WHERE trace_id NOT IN (SELECT trace_id FROM {DIRTY_TABLE}) "
            f"UNION ALL BY NAME {_waiting_passes(lo)})")


def _unregister(conn: duckdb.DuckDBPyConnection, name: str) -> None:
    try:
        conn.unregister(name)
    except duckdb.Error:  # the transaction aborted: its error is the one to see
        pass


def _set_stamp(conn: duckdb.DuckDBPyConnection, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO llmtrace_meta VALUES (?, ?)", [META_KEY, value])
