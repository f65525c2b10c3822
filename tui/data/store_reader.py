"""Every read the explorer makes, each one a short read-only connection that is closed before returning.

DuckDB lets only one process hold the file, so the explorer never keeps a connection: it opens with
``read_connection`` (which retries while a writer holds the store), copies rows into records, and closes.
Only the visible page of requests is read; sorting, filtering and the cache chart are aggregated in SQL.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from llmtrace.tracer.cli.console import printable
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.stages import REQUEST_ROW
from llmtrace.tracer.storage.fetch import first_row, scalar
from llmtrace.tracer.storage.span_records import SPAN_RECORD_COLUMNS, span_record
from llmtrace.tracer.storage.store import (
    StoreError,
    bind_pass_table,
    is_clickhouse_url,
    passes_source,
    read_connection,
)
from llmtrace.tracer.storage.time_views import WHOLE_CALL
from llmtrace.tracer.storage.typed_values import attr
from llmtrace.tracer.storage.views import (
    PASS_OPERATIONS,
    capped_cached_sql,
    hit_rate_sql,
)
from llmtrace.tui.data.filter_expr import CompiledFilter
from llmtrace.tui.data.records import (
    CacheBucket,
    CacheReport,
    DeployCost,
    DeployMark,
    RequestPage,
    RequestRow,
    StoreStamp,
    TraceRecord,
)

T = TypeVar("T")
# the ``requests`` view columns a request row is read from (the registry's, tracer/registry/pass_values.py
# REQUEST_ROW; RequestRow has a field each, taken by name)
REQUEST_COLUMNS = ", ".join(REQUEST_ROW)
_SPAN_ID_AT = REQUEST_ROW.index("span_id")  # a page's rows are matched to its keys by the span id as stored
# Sort keys the request table offers (column key -> SQL expression over the ``requests`` view).
SORT_COLUMNS: dict[str, str] = {
    "time": "start_ns",
    "model": "model",
    "replica": "replica",
    "deploy": "deploy",
    "prompt": "prompt_tokens",
    "cached": "cached_tokens",
    "hit": "hit_ratio",
    "ttft": "ttft_ms",
    "tpot": "tpot_ms",
    "output": "output_tokens",
    "finish": "finish_reason",
    "service": "service",
    "duration": "duration_ms",
    "cost": "cost_usd",
    "trace": "trace_id",
}
MAX_TRACE_SPANS = 5000


class StoreReader:
    """Reads one store; safe to call from worker threads (each call has its own connection).

    ``path`` may also be a ClickHouse store URL (``clickhouse://HOST:8123/DB``, ``chdb://PATH``;
    tracer/storage/clickhouse.py): every query below is DuckDB SQL run inside ClickHouse through the same
    transpiler the analyzers use, so only what a screen shows comes back. There is no file lock to
    leave free, so one connection (views created once) is kept and the workers take turns on it."""

    def __init__(self, path: str | os.PathLike[str], timeout_s: float = 10.0) -> None:
        self.url = str(path) if is_clickhouse_url(str(path)) else None
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._ch: Any = None  # the ClickHouse connection, opened on first use
        self._ch_lock = threading.Lock()

    def __str__(self) -> str:
        return self.url or str(self.path)

    @contextmanager
    def connection(self, kept_passes: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read connection for one piece of work (DuckDB: opened and closed; ClickHouse: the kept one).
        ``kept_passes``: the analyzers may read the writer's pass rows (checking them scans the pass spans
        once, worth it for the analyzers, not for a page of requests)."""
        if self.url is not None:
            with self._ch_lock:
                if self._ch is None:
                    from llmtrace.tracer.storage.clickhouse import open_views

                    self._ch = open_views(self.url)  # a ClickHouseError (a StoreError) says why not
                yield self._ch
            return
        try:
            with read_connection(self.path, timeout_s=self.timeout_s) as conn:
                quiet(conn)
                if kept_passes:
                    bind_pass_table(conn)
                yield conn
        except duckdb.Error as exc:
            raise StoreError(_describe(self.path, exc)) from None

    def close(self) -> None:
        """Close the kept ClickHouse connection (a DuckDB reader holds nothing between calls)."""
        with self._ch_lock:
            if self._ch is not None:
                self._ch.close()
                self._ch = None

    def _read(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        with self.connection() as conn:
            return fn(conn)

    def check(self) -> StoreStamp:
        """Fail with a clear StoreError when the file is missing, corrupt or not an llmtrace store."""

        def run(conn: duckdb.DuckDBPyConnection) -> StoreStamp:
            names = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            missing = {"spans", "requests", "deploys"} - names
            if missing:
                raise StoreError(
                    f"{self} is a DuckDB file but not an llmtrace store (no {', '.join(sorted(missing))})"
                )
            return _stamp(conn)

        return self._read(run)

    def stamp(self) -> StoreStamp:
        return self._read(_stamp)

    def request_page(self, flt: CompiledFilter, sort: str = "time", descending: bool = True,
                     offset: int = 0, limit: int = 200) -> RequestPage:
        if sort not in SORT_COLUMNS:
            raise ValueError(f"unknown sort column {sort!r}; one of {', '.join(SORT_COLUMNS)}")
        if limit <= 0 or offset < 0:
            raise ValueError("limit must be positive and offset non-negative")
        where = f"WHERE {flt.where}" if flt.where else ""
        direction = "DESC" if descending else "ASC"
        order = f"{SORT_COLUMNS[sort]} {direction} NULLS LAST, start_ns DESC, span_id"

        def run(conn: duckdb.DuckDBPyConnection) -> RequestPage:
            store_passes = int(scalar(conn.execute(f"SELECT count(*) FROM spans WHERE operation IN {PASS_OPERATIONS}")))
            # Two steps so only the sort and filter columns are pulled out of the JSON attributes for every
            # pass (DuckDB prunes the view's other columns); the full rows are read for this page alone.
            # With a filter, the match count rides along as a window so the passes are scanned once.
            count = ", count(*) OVER ()" if flt.where else ""
            keys = conn.execute(
                f"SELECT span_id, start_ns{count} FROM requests {where} ORDER BY {order} LIMIT ? OFFSET ?",
                [*flt.params, limit, offset],
            ).fetchall()
            if not flt.where:
                total = store_passes
            elif keys:
                total = int(keys[0][2])
            elif offset == 0:
                total = 0
            else:
                total = int(scalar(conn.execute(f"SELECT count(*) FROM requests {where}", list(flt.params))))
            if not keys:
                return RequestPage((), total, offset, store_passes)
            lo, hi = min(k[1] for k in keys), max(k[1] for k in keys)
            marks = ", ".join("?" for _ in keys)
            rows = conn.execute(
                f"SELECT {REQUEST_COLUMNS} FROM requests WHERE start_ns BETWEEN ? AND ? AND span_id IN ({marks})",
                [lo, hi, *(k[0] for k in keys)],
            ).fetchall()
            by_id = {r[_SPAN_ID_AT]: RequestRow(**dict(zip(REQUEST_ROW, map(_printable, r), strict=True)))
                     for r in rows}
            ordered = tuple(by_id[k[0]] for k in keys if k[0] in by_id)
            return RequestPage(ordered, total, offset, store_passes)

        return self._read(run)

    def time_breakdown(self, pass_span_ids: Sequence[str]) -> dict[str, tuple[tuple[str | None, str, float], ...]]:
        """(phase, stage, exclusive ms) rows of the ``time_breakdown`` view for each of these passes."""
        if not pass_span_ids:
            return {}

        return self._read(lambda conn: _breakdown(conn, pass_span_ids))

    def selection_time_shares(self, flt: CompiledFilter) -> tuple[tuple[str, float], ...]:
        """Median share of wall clock per phase across the filtered passes (server passes when the selection
        has any: a client pass's unobserved share holds its server pass, which would count twice). A client pass that
        saw no first token (a buffered answer, a failed call) is one part beyond its connection, the whole call
        (time_views.pass_is_split), not an "unobserved" share of itself."""

        def run(conn: duckdb.DuckDBPyConnection) -> tuple[tuple[str, float], ...]:
            where = f"WHERE {flt.where}" if flt.where else ""
            rows = conn.execute(f"""
                WITH sel AS (SELECT span_id, side, ttft_ms FROM requests {where}),
                     pick AS (SELECT span_id, side, ttft_ms FROM sel WHERE side = 'server'
                                  OR NOT EXISTS (SELECT 1 FROM sel WHERE side = 'server')),
                     per_pass AS (SELECT t.pass_span_id,
                                         CASE WHEN pick.side = 'client' AND pick.ttft_ms IS NULL
                                                   AND t.stage <> '{S.ARRIVAL_CONNECTION}' THEN '{WHOLE_CALL}'
                                              ELSE coalesce(t.phase, CASE WHEN t.stage = 'unobserved' THEN 'unobserved'
                                                                          ELSE 'other' END) END AS part,
                                         sum(t.share) AS share
                                  FROM time_breakdown t JOIN pick ON pick.span_id = t.pass_span_id
                                  GROUP BY ALL),
                     grid AS (SELECT p.pass_span_id, k.part, coalesce(x.share, 0) AS share
                              FROM (SELECT DISTINCT pass_span_id FROM per_pass) p
                              CROSS JOIN (SELECT DISTINCT part FROM per_pass) k
                              LEFT JOIN per_pass x ON x.pass_span_id = p.pass_span_id AND x.part = k.part)
                SELECT part, median(share) FROM grid GROUP BY part ORDER BY part""", list(flt.params)).fetchall()
            return tuple((str(part), float(share or 0.0)) for part, share in rows)

        return self._read(run)

    def status_message(self, span_id: str) -> str | None:
        """Why a span ended in error, as stored (scrubbed when it was recorded), printable."""
        return self._read(lambda conn: _printable(first_row(conn.execute(
            "SELECT max(status_message) FROM spans WHERE span_id = ?", [span_id]))[0]))

    def selection_whole_call_ms(self, flt: CompiledFilter) -> float | None:
        """The median latency of the filtered client passes that could not be split (no first token seen: a
        buffered answer, a failed call), which the selection's time bar shows as the whole call."""
        where = f"AND ({flt.where})" if flt.where else ""
        return self._read(lambda conn: _f(scalar(conn.execute(
            f"SELECT median(duration_ms) FROM requests WHERE side = 'client' AND ttft_ms IS NULL {where}",
            list(flt.params)))))

    def trace(self, trace_id: str) -> TraceRecord:
        def run(conn: duckdb.DuckDBPyConnection) -> TraceRecord:
            rows = conn.execute(
                f"SELECT {SPAN_RECORD_COLUMNS} FROM spans WHERE trace_id = ? "
                f"ORDER BY start_ns, span_id LIMIT {MAX_TRACE_SPANS}",
                [trace_id],
            ).fetchall()
            spans = tuple(span_record(r, _printable) for r in rows)
            return TraceRecord(trace_id, spans, _breakdown(conn, [s.span_id for s in spans if s.is_pass]))

        return self._read(run)

    def cache_report(self, buckets: int = 240) -> CacheReport:
        if buckets <= 0:
            raise ValueError("buckets must be positive")
        # the kept pass rows when the store has them current (checking costs one scan of the pass spans,
        # far less than building every pass from its spans' JSON, which the report reads whole)
        with self.connection(kept_passes=True) as conn:
            return _cache_report(conn, buckets)

    def first_trace_of(self, trace_ids: list[str]) -> str | None:
        """The first of ``trace_ids`` that is in the store (findings may name traces since removed)."""
        if not trace_ids:
            return None

        def run(conn: duckdb.DuckDBPyConnection) -> str | None:
            marks = ", ".join("?" for _ in trace_ids)
            found = {r[0] for r in conn.execute(
                f"SELECT DISTINCT trace_id FROM spans WHERE trace_id IN ({marks})", trace_ids).fetchall()}
            return next((t for t in trace_ids if t in found), None)

        return self._read(run)


def quiet(conn: duckdb.DuckDBPyConnection) -> None:
    """DuckDB draws a progress bar on the terminal for slow queries: it would scribble over the UI."""
    conn.execute("SET enable_progress_bar = false")


def _stamp(conn: duckdb.DuckDBPyConnection) -> StoreStamp:
    passes, latest = first_row(conn.execute(
        f"SELECT count(*), coalesce(max(start_ns), 0) FROM spans WHERE operation IN {PASS_OPERATIONS}"))
    deploys = scalar(conn.execute("SELECT count(*) FROM deploys"))
    return StoreStamp(int(passes), int(latest), int(deploys))


def _cache_report(conn: duckdb.DuckDBPyConnection, n: int) -> CacheReport:
    # The logical passes: one row per pass with the client's and server's spans joined, the trace's deploy,
    # the same hit rate `llmtrace check` and `diagnose` report. They come from the pass rows the store keeps
    # (ClickHouse's, or the writer's table when its stamp is current: pass_table), as the analyzers' Query
    # reads them; else from the `passes` view's SELECT over the spans (so a store an older version wrote
    # works read-only).
    # A name of its own: on ClickHouse the "temporary" table is a Memory table other readers of the server
    # see, so it is dropped whatever happens below (in DuckDB it would die with the connection).
    source = passes_source(conn)
    tui_passes = f"tui_passes_{uuid.uuid4().hex[:12]}"
    conn.execute(f"""CREATE TEMP TABLE {tui_passes} AS
        SELECT trace_id, start_ns, coalesce(deploy, '(none)') AS deploy, prompt_tokens AS prompt,
               {capped_cached_sql()} AS cached, ttft_ms AS ttft, cost_usd AS cost
        FROM {source}""")
    try:
        return _cache_from(conn, tui_passes, n)
    finally:
        conn.execute(f"DROP TABLE IF EXISTS {tui_passes}")


def _cache_from(conn: duckdb.DuckDBPyConnection, tui_passes: str, n: int) -> CacheReport:
    """The report over the table of passes ``_cache_report`` made."""
    side = "TRUE"
    lo, hi = first_row(conn.execute(f"SELECT min(start_ns), max(start_ns) FROM {tui_passes} WHERE {side}"))
    buckets: list[CacheBucket] = []
    if lo is not None:
        span = max(1, int(hi) - int(lo) + 1)
        width = -(-span // n)  # ceiling division so the last pass falls inside bucket n-1
        rows = conn.execute(
            f"""SELECT (start_ns - ?) // ? AS b, count(*), coalesce(sum(prompt) FILTER (WHERE cached IS NOT NULL), 0),
                       coalesce(sum(cached), 0)
                FROM {tui_passes} WHERE {side} GROUP BY b ORDER BY b""",
            [int(lo), width],
        ).fetchall()
        by_bucket = {int(b): (int(c), int(p), int(k)) for b, c, p, k in rows}
        for b in range(n):
            c, p, k = by_bucket.get(b, (0, 0, 0))
            start = int(lo) + b * width
            buckets.append(CacheBucket(start, start + width, c, p, k))
    marks = [DeployMark(str(name), int(at), note) for name, at, note in conn.execute(
        "SELECT name, at_ns, note FROM deploys WHERE at_ns IS NOT NULL ORDER BY at_ns").fetchall()]
    named = {m.name for m in marks}
    # A deploy nobody marked still shows where its first pass appeared (from service.version).
    first_seen = conn.execute(
        f"SELECT deploy, min(start_ns) FROM {tui_passes} WHERE deploy <> '(none)' AND {side} GROUP BY deploy ORDER BY 2"
    ).fetchall()
    if len(first_seen) > 1:
        marks += [DeployMark(str(d), int(at), "first pass") for d, at in first_seen[1:] if d not in named]
    marks.sort(key=lambda m: m.at_ns)
    costs = conn.execute(
        f"""WITH pass AS (
                SELECT deploy, count(*) AS passes, {hit_rate_sql("cached", "prompt")} AS hit,
                       median(ttft) AS ttft, avg(prompt) AS prompt, min(start_ns) AS first
                FROM {tui_passes} WHERE {side} GROUP BY 1),
            per_trace AS (
                SELECT trace_id, any_value(deploy) AS deploy, sum(cost) AS cost FROM {tui_passes} GROUP BY trace_id),
            meter AS (
                SELECT trace_id, sum({attr(N.METERS_COST_USD)}) AS cost
                FROM spans WHERE stage = '{S.METERS_CACHE_ACCOUNTING}' GROUP BY trace_id),
            cost AS (
                SELECT t.deploy, avg(coalesce(t.cost, m.cost)) AS per_request
                FROM per_trace t LEFT JOIN meter m USING (trace_id) GROUP BY 1)
            SELECT p.deploy, p.passes, c.per_request, p.hit, p.ttft, p.prompt
            FROM pass p LEFT JOIN cost c USING (deploy) ORDER BY p.first"""
    ).fetchall()
    return CacheReport(
        tuple(buckets),
        tuple(marks),
        tuple(DeployCost(str(d), int(n_), _f(c), _f(h), _f(t), _f(p)) for d, n_, c, h, t, p in costs),
    )


def _f(value: float | None) -> float | None:
    return None if value is None else float(value)


def _breakdown(conn: duckdb.DuckDBPyConnection,
               pass_span_ids: Sequence[str]) -> dict[str, tuple[tuple[str | None, str, float], ...]]:
    if not pass_span_ids:
        return {}
    marks = ", ".join("?" for _ in pass_span_ids)
    try:
        rows = conn.execute(
            f"SELECT pass_span_id, phase, stage, exclusive_ms FROM time_breakdown WHERE pass_span_id IN ({marks})",
            list(pass_span_ids)).fetchall()
    except duckdb.CatalogException:  # a store written before the view existed: the waterfall still works
        return {}
    out: dict[str, list[tuple[str | None, str, float]]] = {}
    for sid, phase, stage, ms in rows:
        out.setdefault(sid, []).append((phase, stage, float(ms or 0.0)))
    return {k: tuple(v) for k, v in out.items()}


def _printable(value: Any) -> Any:
    """Strings from the store with control characters shown as escapes: any OTLP sender can put a
    terminal escape in a span name or a value, and the explorer draws straight onto the terminal. A driver
    value in, the same shape back (str, list, dict; anything else as it is)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    return value


def _describe(path: Path, exc: duckdb.Error) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "does not exist" in first and ("Table" in first or "Catalog" in first):
        return f"{path} is not an llmtrace store ({first})"
    return f"cannot read store {path}: {first}"
