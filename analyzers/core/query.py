"""SQL helpers every analyzer shares: the time window, typed boundary values out of the JSON attributes,
and rows as dicts. Analyzers read the store's documented relations (``spans``, the ``passes`` view) only, so
they run the same over a DuckDB file and over a Parquet export.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from llmtrace.analyzers.core.stats import (
    percentile as percentile,  # re-exported: analyzers import it from here
)
from llmtrace.tracer.registry.stages import is_stage
from llmtrace.tracer.storage.store import (
    MAX_TRACE_WINDOWS,
    exported_stages,
    merged_windows,
    pass_table,
    passes_source,
    spans_in_window,
    stage_view,
    trace_spans_sql,
    windowed_spans_sql,
)
from llmtrace.tracer.storage.typed_values import SQL_TYPES, ValueSpec, read_sql, typed
from llmtrace.tracer.storage.typed_values import attr as attr  # re-exported: the analyzers' SQL helpers
from llmtrace.tracer.storage.typed_values import struct_spec as struct_spec
from llmtrace.tracer.storage.views import (
    PASS_OPERATIONS,
    json_values,
    stage_value_types,
)

# One result row, column name -> value. The driver types values Any (a column is whatever the SQL made
# it); as_int/as_float read one defensively where NULL or a string may come back.
Row = dict[str, Any]

# A pass's spans are looked for from this long before its start to this long after its end: the client and the
# server stamp their spans by their own hosts' clocks, which may differ
SKEW_NS = 60 * 10**9

# the span columns a stage's relation carries beside its values (Query.stage_sql)
_STAGE_COLUMNS = "trace_id, span_id, parent_span_id, start_ns, duration_ms, deploy, service"


# What DuckDB's block allocator may keep of the buffer memory a run frees (tables, hash tables, CTEs):
# without it the freed blocks go back to the system between queries and the next query takes every page
# again as a fresh page fault: system time a diagnose pays on every pass build and after (100k passes:
# 25-40k faults a pass build, 107-136k a whole run; 67-91k with this). Kept for the connection's life
# (given back when it closes); the pages are only taken as used, and DuckDB's memory limit still bounds
# what is in use.
KEEP_FREED_BLOCKS = "512MB"


def keep_freed_blocks(conn: object) -> None:
    """Let a DuckDB connection's database reuse the buffer blocks a query frees (KEEP_FREED_BLOCKS) instead of
    giving them back to the system; a setting the user made is left as it is, and so is any other engine."""
    if not isinstance(conn, duckdb.DuckDBPyConnection):
        return
    try:
        row = conn.execute("SELECT current_setting('block_allocator_memory')").fetchone()
        if row is not None and str(row[0]).startswith("0 "):
            conn.execute(f"SET block_allocator_memory = '{KEEP_FREED_BLOCKS}'")
    except duckdb.Error:  # an older engine without the setting, or a configuration locked against SET
        pass


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(slots=True)
class _PassTable:
    """A run's materialized pass table, shared by a Query and its forks: built once, by whichever asks first
    (the others wait on the lock), dropped by the Query that owns it. With forks it lives in ``catalog``, an
    attached in-memory database every cursor of the connection sees (a temporary table is per connection)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    name: str | None = None
    catalog: str | None = None
    # the kept per-pass relation the owner's connection has bound (tracer/storage/store.py pass_table), looked
    # up on that connection before forking: a fork's cursor is not the connection it was bound to
    kept: str | None = None
    kept_known: bool = False


@dataclass(slots=True)
class Query:
    """A connection plus the window the analyzers look at: spans started at or after ``since_ns``, and with
    ``service``, only the traces that service took part in (a shared collector store holds many apps).

    ``passes`` is the documented ``passes`` view (one row per logical inference pass, the client's and the
    server's spans of it joined) over that window, read once into a temporary table that every analyzer
    of a run shares: the view parses each pass's JSON attributes and joins the two sides, and doing that
    once instead of per analyzer is most of what keeps ``diagnose`` fast on large stores. ``release()``
    drops it. ``fork()`` gives another thread a Query of its own over the same run (concurrent_run.py).
    """

    conn: duckdb.DuckDBPyConnection
    since_ns: int | None = None
    service: str | None = None
    _passes: _PassTable = field(default_factory=_PassTable)
    _owner: bool = True  # this Query made the pass table (a fork only reads it) and closes ``conn`` if a fork
    # A Parquet export with its per-pass datasets bound (tracer/storage/store.py): the stages that have a
    # typed view; None until looked up, empty when the connection has none (then everything reads spans).
    _stage_views: frozenset[str] | None = None
    _columns: dict[str, frozenset[str]] = field(default_factory=dict)  # export stage view -> its columns
    _exported: bool = False
    # results several analyzers of one run share (e.g. the TTFT split of a pass, read by the what-if's
    # prefill rate and by the TTFT evidence line), keyed by what computed them; gone with the Query
    memo: dict[str, Any] = field(default_factory=dict)
    _temp_tables: list[str] = field(default_factory=list)
    # names this run's temp tables: on ClickHouse they are tables every client of the database sees, and
    # an id() can repeat across processes
    _tag: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    _json_checked: bool | None = None  # the spans' attributes are of DuckDB's JSON type (looked up once)

    @property
    def spans(self) -> str:
        # the service's own spans and the server spans of its traces (the server is another service)
        return spans_in_window("spans", self.since_ns, None, self.service)

    @property
    def json_checked(self) -> bool:
        """True when the spans are a store's own table (not a view over Parquet files, whose JSON-annotated
        column nobody validated) with attributes of DuckDB's JSON type: every document in it was validated
        when written, so parsing it needs no TRY (tracer/storage/views.py json_values)."""
        if self._json_checked is None:
            self._json_checked = False
            if isinstance(self.conn, duckdb.DuckDBPyConnection) and not self.exported:
                try:
                    table = self.conn.execute(
                        "SELECT c.data_type FROM duckdb_columns() c JOIN duckdb_tables() t USING (database_name, "
                        "schema_name, table_name) WHERE t.table_name = 'spans' AND NOT t.temporary "
                        "AND c.column_name = 'attributes'").fetchall()
                    desc = self.conn.execute(f"SELECT attributes FROM {self.spans} LIMIT 0").description or []
                    self._json_checked = [r[0] for r in table] == ["JSON"] and bool(desc) and str(desc[0][1]) == "JSON"
                except duckdb.Error:  # no such column here: the parse stays guarded
                    self._json_checked = False
        return self._json_checked

    @property
    def passes(self) -> str:
        """The logical passes in the window (see the ``passes`` view in docs/sql.md)."""
        self.materialize()
        return str(self._passes.name)

    @property
    def passes_built(self) -> bool:
        """Whether this run's pass table has been read (by this Query or a fork of it)."""
        return self._passes.name is not None

    @property
    def exported(self) -> bool:
        """True when the connection reads an export's per-pass datasets (``passes`` is DIR.passes, stage
        values come from DIR.stages), so the analyzers need not build passes from the spans."""
        if self._stage_views is None:
            stages = exported_stages(self.conn)
            self._exported = stages is not None
            self._stage_views = frozenset(stage_view(s) for s in stages or ())
        return self._exported

    def materialize(self) -> None:
        """Build the run's pass table now (every later ``passes`` reads it)."""
        shared = self._passes
        if shared.name is not None:
            return
        with shared.lock:  # forks of one run wait for the one build
            if shared.name is None:
                keep_freed_blocks(self.conn)
                shared.name = self._build_pass_table()

    def _build_pass_table(self) -> str:
        since, service = self.since_ns, self.service
        if self.exported:
            # the export's pass rows, in the window (a pass is in it when it started in it); read where
            # used, a few columns at a time, rather than copied into memory (10M passes are gigabytes)
            rel = passes_source(self.conn, kept="passes", since_ns=since, service=service)
            return rel if rel.startswith("(") else f"(SELECT * FROM {rel})"
        catalog = self._passes.catalog
        name = f"{catalog}.passes" if catalog else f"_llmtrace_passes_{self._tag}"
        create = f"CREATE OR REPLACE {'' if catalog else 'TEMP '}TABLE {name} AS SELECT * FROM"
        # ClickHouse's kept pass rows, or the writer's in a store (issue 21), looked up on the owner's
        # connection before forking; else the passes built from the window's spans (passes_source: the view
        # itself may be missing from a store an older version wrote and opened read-only here)
        kept = self._passes.kept if self._passes.kept_known else pass_table(self.conn)
        rel = passes_source(self.conn, "spans", self.json_checked, since_ns=since, service=service, kept=kept)
        self.conn.execute(f"{create} {rel}")
        return name

    def temp_views(self) -> list[str]:
        """The CREATE statements of the connection's temporary views (a span filter's ``spans`` and views), in
        the order they were made: what :meth:`fork` makes again on its cursor."""
        rows = self.conn.execute("SELECT sql FROM duckdb_views() WHERE temporary AND NOT internal "
                                 "ORDER BY view_oid").fetchall()
        return [str(sql) for (sql,) in rows]

    def fork(self, views: Sequence[str] | None = None) -> Query:
        """A Query over a new cursor of the same database, for running analyzers in another thread (a DuckDB
        connection runs one query at a time): the same window, the same pass table (built once, by whichever
        of them asks first) and memo. The connection's temporary views are made again on the cursor, which
        would not see them (``views``: :meth:`temp_views`, when the caller forks several times). Call
        :meth:`shareable` first; ``release()`` each fork, then this Query."""
        checked, exported = self.json_checked, self.exported  # looked up once, here, not by every fork
        cursor = self.conn.cursor()
        try:
            for sql in self.temp_views() if views is None else views:
                cursor.execute(sql)
        except BaseException:
            cursor.close()
            raise
        return Query(cursor, self.since_ns, self.service, _passes=self._passes, _owner=False,
                     _stage_views=self._stage_views, _columns=self._columns, _exported=exported,
                     memo=self.memo, _json_checked=checked)

    def shareable(self) -> bool:
        """Whether forks can run beside this Query: a DuckDB connection whose temporary objects are views
        only (a temporary table's rows could not be made again on a cursor), with the pass table not built
        yet; then the pass table is made in an attached in-memory database the forks see too. Asked before
        the caller makes temporary tables of its own (which the analyzers do not read), it stays yes."""
        if self._passes.catalog is not None:  # said yes before: the pass table is (or will be) in the catalog
            return True
        if not isinstance(self.conn, duckdb.DuckDBPyConnection) or self._passes.name is not None:
            return False
        from llmtrace.tracer.storage.store import pass_table

        self._passes.kept, self._passes.kept_known = pass_table(self.conn), True
        try:
            row = self.conn.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone()
            if row is None or row[0]:
                return False
            catalog = f"_llmtrace_run_{self._tag}"
            self.conn.execute(f"ATTACH ':memory:' AS {catalog} (READ_WRITE)")
        except duckdb.Error:  # e.g. a configuration locked against ATTACH: the analyzers run one by one
            return False
        self._passes.catalog = catalog
        return True

    def release(self) -> None:
        if self._owner:
            self.memo.clear()  # (a fork's memo is its owner's, which other forks may still read)
        try:
            while self._temp_tables:
                self.conn.execute(f"DROP TABLE IF EXISTS {self._temp_tables.pop()}")
        finally:
            if not self._owner:
                self.conn.close()  # a fork's own cursor
            else:
                self._drop_pass_table()

    def _drop_pass_table(self) -> None:
        shared, name = self._passes, self._passes.name
        shared.name = None
        try:
            if name is not None and not name.startswith("("):
                self.conn.execute(f"DROP TABLE IF EXISTS {name}")
        finally:
            if shared.catalog is not None:
                catalog, shared.catalog = shared.catalog, None
                self.conn.execute(f"DETACH DATABASE IF EXISTS {catalog}")

    def rows(self, sql: str, params: Sequence[object] | None = None) -> list[Row]:
        cur = self.conn.execute(sql, list(params) if params else None)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=False)) for r in cur.fetchall()]

    def one(self, sql: str, params: Sequence[object] | None = None) -> Row:
        rows = self.rows(sql, params)
        return rows[0] if rows else {}

    def stage(self, stage_id: str, values: ValueSpec, where: str = "",
              extra: str = "") -> list[Row]:
        """Rows of one stage's spans: trace/span/parent ids, start, duration, deploy, plus ``values``
        (alias -> value name, its type from the registry); ``where`` filters on those aliases."""
        sql = f"SELECT * FROM {self.stage_sql(stage_id, values, extra)} {('WHERE ' + where) if where else ''}"
        return self.rows(sql)

    def flagged(self, stage_id: str, values: ValueSpec, where: str,
                aggs: str = "") -> tuple[Row, tuple[str, ...]] | None:
        """The "count the flagged spans, quote a few" check many analyzers make: over a stage's spans that
        match ``where``, one row with ``n`` and the ``aggs`` (SQL select items over the ``values`` aliases),
        and up to five of their trace ids; None when no span matches."""
        # the newest five, so a run quotes the same traces whatever order the scan returned them in
        row = self.one(f"SELECT count(*) AS n{', ' + aggs if aggs else ''}, "
                       "(list(trace_id ORDER BY start_ns DESC))[1:5] AS ids "
                       f"FROM {self.stage_sql(stage_id, values)} WHERE {where}")
        if not row.get("n"):
            return None
        return row, tuple(row.pop("ids"))

    def trace_spans(self, trace_ids: Sequence[str]) -> str:
        """The spans of a few traces in the window, as SQL (``trace_ids`` must be checked ids: they go in as
        literals). Over an export's datasets each trace's time window narrows the read to a few row groups."""
        ids = list(dict.fromkeys(trace_ids))
        if self.exported:
            name = trace_spans_sql(self.conn, self.spans, ids)
            self._temp_tables.append(name)
            return name
        return self._store_trace_spans(ids)

    def _store_trace_spans(self, ids: list[str]) -> str:
        """:meth:`trace_spans` over a store: the spans of ``ids`` that started inside one of their pass spans
        (a pass span encloses its stage spans), read once into a temporary table. The windows are time ranges,
        which the store's time-ordered row groups answer from a few of them; a filter on the trace id alone
        would read the id of every span in the store (and DuckDB turns a long IN list into a join over all
        of them). The run's pass table holds the client's times; the server stamps its spans by its own
        clock, so its pass spans are looked up within SKEW_NS of those and their own times added. A trace
        with no pass in the window is read by its id."""
        literals = ", ".join(_quote(t) for t in ids)
        client = self.conn.execute(f"SELECT min(start_ns), max(end_ns) FROM {self.passes} "
                                   f"WHERE trace_id IN ({literals}) GROUP BY trace_id").fetchall()
        exact: list[tuple[int, int]] = []
        if len(client) == len(ids) and all(lo is not None and hi is not None for lo, hi in client):
            near = merged_windows([(int(lo) - SKEW_NS, int(hi) + SKEW_NS) for lo, hi in client])
            if len(near) <= MAX_TRACE_WINDOWS:
                sides = self.conn.execute(" UNION ALL ".join(
                    f"SELECT start_ns, end_ns FROM {self.spans} WHERE start_ns BETWEEN {lo} AND {hi} "
                    f"AND operation IN {PASS_OPERATIONS} AND trace_id IN ({literals})" for lo, hi in near)).fetchall()
                exact = merged_windows([*client, *sides])
        return self.temp_table(windowed_spans_sql(self.spans, literals, exact))

    def temp_table(self, select: str) -> str:
        """``select``'s rows read once into a temporary table of this Query's, dropped by ``release()``: for a
        result several queries read, which a subquery would compute again in each of them."""
        name = f"_llmtrace_tmp_{self._tag}_{len(self._temp_tables)}"
        self.conn.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {select}")
        self._temp_tables.append(name)
        return name

    def count(self, stage_id: str) -> int:
        """How many spans of a stage are in the window."""
        if self.exported:
            row = self.conn.execute(f"SELECT count(*) FROM {self.stage_sql(stage_id, {})}").fetchone()
            return int(row[0]) if row else 0
        row = self.conn.execute(f"SELECT count(*) FROM {self.spans} WHERE stage = '{stage_id}'").fetchone()
        return int(row[0]) if row else 0

    def stage_sql(self, stage_id: str, values: ValueSpec, extra: str = "",
                  source: str | None = None) -> str:
        """The same relation as :meth:`stage`, as SQL to build on. Each span's JSON is parsed once. ``source``:
        a relation of the window's spans to read them from instead of all of them (:meth:`stage_spans_sql`, for
        a query that reads several stages' spans of the same few passes in one scan); an export's per-stage
        datasets are read as they are. ``values``: alias -> value name (a registry constant), typed as the stage
        declares it (tracer/storage/typed_values.py; a name the stage does not declare is an error)."""
        values = typed(stage_id, values)
        if self.exported:
            rel = self._exported_stage_sql(stage_id, values, extra)
            if rel is not None:
                return rel
        cols = ", ".join(f'{read_sql(f"v.{_ident(n)}", n, stage_id)} AS {alias}' for alias, (n, _) in values.items())
        return (f"(SELECT {_STAGE_COLUMNS}{', ' + cols if cols else ''} FROM (SELECT *, "
                f"{json_values(struct_spec(values), self.json_checked)} AS v FROM {source or self.spans} "
                f"WHERE stage = '{stage_id}'{' ' + extra if extra else ''}))")

    def stage_spans_sql(self, stage_ids: Sequence[str], extra: str = "") -> str:
        """The spans of several stages (``extra``: more of the WHERE clause), with the columns :meth:`stage_sql`
        reads: one scan of the store for a query that then reads each stage from it (its ``source``), where one
        scan a stage would read every span's stage column once per stage. (DuckDB applies a list of stages only
        after the scan has read every span's attributes; a range of stage names it applies inside the scan, so
        the range the stages span goes first and the list picks them out of it: the same rows.)"""
        stages = ", ".join(_quote(s) for s in stage_ids)
        lo, hi = _quote(min(stage_ids)), _quote(max(stage_ids))
        return (f"(SELECT {_STAGE_COLUMNS}, stage, attributes FROM {self.spans} "
                f"WHERE stage >= {lo} AND stage <= {hi} AND stage IN ({stages}){' ' + extra if extra else ''})")

    def _view_columns(self, view: str) -> frozenset[str]:
        """The columns of one of the export's stage views (cached: an export does not change under a run)."""
        if view not in self._columns:
            try:
                rows = self.conn.execute(f'SELECT * FROM "{view}" LIMIT 0').description or []
            except Exception:  # noqa: BLE001 - no such view: every value reads as NULL
                rows = []
            self._columns[view] = frozenset(str(r[0]) for r in rows)
        return self._columns[view]

    def _exported_stage_sql(self, stage_id: str, values: Mapping[str, tuple[str, str]], extra: str) -> str | None:
        """:meth:`stage_sql` over the export's per-stage dataset: the declared values are columns there, typed
        as the registry declares them (the same json_transform the spans path runs). None when a value is not
        declared (or asked as another type), or ``extra`` reads the JSON: then the spans answer."""
        if not is_stage(stage_id):
            return None
        types = stage_value_types(stage_id)
        if "attributes" in extra or any(SQL_TYPES.get(t) != types.get(n) for n, t in values.values()):
            return None
        base = "trace_id, span_id, parent_span_id, start_ns, duration_ms, deploy, service"
        view = stage_view(stage_id)
        have = self._view_columns(view)
        # a value declared after the export was written has no column there: NULL, as on spans without it
        cols = "".join(f", {read_sql(_ident(n), n, stage_id)} AS {alias}" if n in have
                       else f", CAST(NULL AS {SQL_TYPES[t]}) AS {alias}" for alias, (n, t) in values.items())
        if view not in (self._stage_views or ()):  # no span of this stage was exported: no rows, same columns
            nulls = "".join(f", CAST(NULL AS {SQL_TYPES[t]}) AS {alias}" for alias, (_, t) in values.items())
            return (f"(SELECT CAST(NULL AS VARCHAR) AS trace_id, CAST(NULL AS VARCHAR) AS span_id, CAST(NULL AS "
                    f"VARCHAR) AS parent_span_id, CAST(NULL AS BIGINT) AS start_ns, CAST(NULL AS DOUBLE) AS "
                    f"duration_ms, CAST(NULL AS VARCHAR) AS deploy, CAST(NULL AS VARCHAR) AS service{nulls} "
                    "WHERE false)")
        where = ["true"]
        if self.since_ns is not None:
            where.append(f"start_ns >= {int(self.since_ns)}")
        if self.service is not None:
            where.append(f"trace_id IN (SELECT trace_id FROM passes WHERE service = {_quote(self.service)})")
        return f"(SELECT {base}{cols} FROM {view} WHERE {' AND '.join(where)}{' ' + extra if extra else ''})"


def sample_ids(ids: Sequence[object], n: int = 5) -> tuple[str, ...]:
    """A few distinct trace ids, in the order given, for evidence."""
    out: list[str] = []
    for i in ids:
        if i is not None and str(i) not in out:
            out.append(str(i))
            if len(out) >= n:
                break
    return tuple(out)


def as_int(value: object, default: int = 0) -> int:
    """A row value as an int; ``default`` for NULL or what is not a number."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return default
    return default


def as_float(value: object, default: float = 0.0) -> float:
    """A row value as a float; ``default`` for NULL or what is not a number."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return default
    return default
