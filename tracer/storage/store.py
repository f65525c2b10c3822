"""Opening the DuckDB store: schema on first write, short connections, retry while another process holds it.

DuckDB lets one process hold a file at a time (a second cannot open it, even read-only), so every
llmtrace process — app exporters, the collector, ``llmtrace sql`` and ``explore`` — opens the store for
a short moment and closes it again, retrying with jittered backoff while the file is busy.
"""

from __future__ import annotations

import os
import random
import re
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import duckdb

from llmtrace.tracer.settings import env
from llmtrace.tracer.storage.views import SCHEMA_VERSION, TABLES_SQL, views_sql


class StoreError(RuntimeError):
    """The store cannot be used: a clear message for people, never a DuckDB traceback."""


class StoreBusy(StoreError):
    """Another process kept the store locked for longer than we were willing to wait."""


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    # Across processes DuckDB reports a file lock; inside one process a read-only and a read-write
    # connection to the same file conflict as "different configuration" until the other one closes, and
    # a connection to a file that another instance holds attached (the store writer's, attached.py) as a
    # "unique file handle conflict" until it detaches.
    return ("lock" in text or "conflicting" in text or "resource temporarily unavailable" in text
            or "different configuration" in text or "unique file handle conflict" in text)


def _open(path: Path, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            if not _is_lock_error(exc):
                raise StoreError(_explain(path, exc)) from None
            if time.monotonic() >= deadline:
                raise StoreBusy(f"store {path} is locked by another process{_holder(exc)}; "
                                f"waited {timeout_s:.0f}s") from None
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.1)


def _holder(exc: Exception) -> str:
    """DuckDB names the process holding the lock ("... is held in /usr/bin/python3 (PID 4242)"): worth
    passing on, since it is the one thing a person needs to find and stop it."""
    found = re.search(r"held in (.+?) \(PID (\d+)\)", str(exc))
    return f" (PID {found[2]}, {found[1]})" if found else ""


def _explain(path: Path, exc: Exception) -> str:
    text = str(exc)
    if "not a valid DuckDB database" in text or "Corrupt" in text or "corrupt" in text or "magic" in text.lower():
        return f"{path} is not a readable llmtrace store (corrupt or not a DuckDB file): {text.splitlines()[0]}"
    return f"cannot open store {path}: {text.splitlines()[0]}"


# Tables every llmtrace store has from its first write on (views.TABLES_SQL). A DuckDB file without them is
# someone else's database: saying so beats the "Table spans does not exist" of the first view a command reads.
STORE_TABLES = ("spans", "llmtrace_meta")


def _not_a_file(p: Path) -> str | None:
    """Why ``p`` cannot be a store before DuckDB is asked, or None."""
    if not p.exists():
        return f"no store at {p} (run your app with llmtrace.init(), `llmtrace demo`, or pass --db)"
    if p.is_dir():
        return f"{p} is a directory, not a store file (pass the .duckdb file inside it with --db)"
    try:
        if p.stat().st_size == 0:
            return f"{p} is an empty file, not an llmtrace store"
    except OSError as exc:
        return f"cannot open store {p}: {exc.strerror or exc}"
    return None


def _check_is_store(p: Path, conn: duckdb.DuckDBPyConnection) -> None:
    names = {r[0] for r in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main'").fetchall()}
    missing = [t for t in STORE_TABLES if t not in names]
    if missing:
        raise StoreError(f"{p} is a DuckDB file but not an llmtrace store (no {', '.join(missing)} table)")


def ensure_schema(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(TABLES_SQL)
    rows = conn.execute("SELECT value FROM llmtrace_meta WHERE key = 'schema_version'").fetchall()
    if not rows or rows[0][0] != str(SCHEMA_VERSION):
        for stmt in views_sql():
            conn.execute(stmt)
        conn.execute(
            "INSERT OR REPLACE INTO llmtrace_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )


@contextmanager
def write_connection(path: str | os.PathLike[str], timeout_s: float = 30.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short read-write connection with the schema in place; closed (lock released) on exit."""
    p = Path(path)
    if not p.parent.exists():
        raise StoreError(f"directory {p.parent} does not exist")
    conn = _open(p, read_only=False, timeout_s=timeout_s)
    try:
        ensure_schema(conn)
        yield conn
    finally:
        conn.close()


@contextmanager
def read_connection(path: str | os.PathLike[str], timeout_s: float = 30.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short read-only connection to an llmtrace store: every command that reads a store opens it here, so
    each bad path is one sentence (a StoreError) whichever command met it: missing (never an empty new file),
    a directory, an empty file, not a DuckDB file, a DuckDB file that is not a store, or a store another
    process keeps locked for longer than ``timeout_s`` (StoreBusy)."""
    p = Path(path)
    reason = _not_a_file(p)
    if reason is not None:
        raise StoreError(reason)
    conn = _open(p, read_only=True, timeout_s=timeout_s)
    try:
        try:
            _check_is_store(p, conn)
        except duckdb.Error as exc:
            raise StoreError(_explain(p, exc)) from None
        yield conn
    finally:
        conn.close()


def check_existing_store(path: str | os.PathLike[str], timeout_s: float = 5.0) -> None:
    """For a command that makes the store when there is none (``llmtrace collect``): a file already at
    ``path`` must be a store, else the StoreError read_connection gives (so llmtrace's tables are never
    written into someone else's DuckDB file). A store a writer holds right now is one: the command's own
    writer waits its turn as it always does."""
    if not os.path.lexists(path):
        return
    try:
        with read_connection(path, timeout_s=timeout_s):
            pass
    except StoreBusy:
        return


@dataclass(frozen=True, slots=True)
class SpanFilter:
    """Which spans the read views show: one service, spans that started at or after ``since_ns``."""

    service: str | None = None
    since_ns: int | None = None

    def where(self) -> str:
        parts = []
        if self.service is not None:
            parts.append(f"service = {_quote(self.service)}")
        if self.since_ns is not None:
            parts.append(f"start_ns >= {int(self.since_ns)}")
        return " WHERE " + " AND ".join(parts) if parts else ""

    def deploys_where(self) -> str:
        # Deploy marks without a service apply to every service, so they stay.
        return f" WHERE service IS NULL OR service = {_quote(self.service)}" if self.service is not None else ""


def parquet_files(glob: str) -> list[str]:
    """The files a Parquet glob names now (expanded once, so a locked connection can be allowed exactly these)."""
    conn = duckdb.connect(":memory:")
    try:
        files = [r[0] for r in conn.execute("SELECT file FROM glob(?) ORDER BY file", [glob]).fetchall()]
    except duckdb.Error as exc:
        raise StoreError(f"cannot read Parquet {glob}: {str(exc).splitlines()[0]}") from None
    finally:
        conn.close()
    if not files:
        raise StoreError(f"no Parquet files match {glob}")
    return files


def parquet_connection(glob: str, span_filter: SpanFilter | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection whose ``spans`` and views read a Parquet export (local or object storage).

    Every object is a view (``deploys`` too), so the connection holds no table a query could change."""
    return _parquet(glob, span_filter)[0]


def _parquet(glob: str, span_filter: SpanFilter | None) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    files = parquet_files(glob)
    where = span_filter.where() if span_filter else ""
    conn = duckdb.connect(":memory:")
    try:
        listed = "[" + ", ".join(_quote(f) for f in files) + "]"
        conn.execute(f"CREATE VIEW spans AS SELECT * FROM read_parquet({listed}, hive_partitioning = true, "
                     f"hive_types_autocast = false, union_by_name = true){where}")
        conn.execute("SELECT * FROM spans LIMIT 0")  # a broken file is a StoreError now, not at the first query
    except duckdb.Error as exc:
        conn.close()
        raise StoreError(f"cannot read Parquet {glob}: {str(exc).splitlines()[0]}") from None
    conn.execute("CREATE VIEW deploys AS SELECT CAST(NULL AS VARCHAR) AS name, CAST(NULL AS VARCHAR) AS service, "
                 "CAST(NULL AS BIGINT) AS at_ns, CAST(NULL AS VARCHAR) AS note WHERE false")
    for stmt in views_sql():
        conn.execute(stmt)
    if not where:  # a span filter changes which spans make a pass: then the passes come from the spans
        files += _bind_export_datasets(conn, glob)
    return conn, files


# The view that says which per-pass datasets of an export a Parquet connection reads (analyzers/core/query.py).
EXPORT_DATASETS_VIEW = "llmtrace_export_datasets"
STAGE_VIEW_PREFIX = "stage_values__"


def stage_view(stage_id: str) -> str:
    """The view over one stage's rows of an export's per-stage dataset (``gen.stop`` -> stage_values__gen__stop)."""
    return STAGE_VIEW_PREFIX + stage_id.replace(".", "__")


def export_root(glob: str) -> str | None:
    """The directory an export's spans glob starts at (``traces/**/*.parquet`` -> ``traces``); None for a
    pattern without a directory of its own."""
    keep: list[str] = []
    for part in glob.replace("\\", "/").split("/"):
        if any(ch in part for ch in "*?[{"):
            root = "/".join(keep).rstrip("/")
            return root or None
        keep.append(part)
    return None


def _glob(conn: duckdb.DuckDBPyConnection, pattern: str) -> list[str]:
    try:
        return [r[0] for r in conn.execute("SELECT file FROM glob(?) ORDER BY file", [pattern]).fetchall()]
    except duckdb.Error:
        return []


def _bind_export_datasets(conn: duckdb.DuckDBPyConnection, glob: str) -> list[str]:
    """Where ``llmtrace export --parquet DIR`` also wrote DIR.passes (the ``passes`` view, one row a pass) and
    DIR.stages (stage spans, declared values as typed columns), read those: ``passes`` becomes the pass
    dataset and each stage gets a view over its own files, so the analyzers read a few typed columns
    instead of building every pass from the spans' JSON. Returns the files bound (none: nothing changes)."""
    from llmtrace.tracer.storage.views import PASS_COLUMNS

    root = export_root(glob)
    # a partition filter in the glob (date=2026-11-*, service=checkout) picks spans the whole-export datasets
    # do not follow (a pass joins its client's and server's spans, of two services): then the spans answer
    if root is None or "=" in glob[len(root):]:
        return []
    pass_files = _glob(conn, f"{root}.passes/**/*.parquet")
    stage_files = _glob(conn, f"{root}.stages/**/*.parquet")
    if not pass_files or not stage_files:
        return []
    by_stage: dict[str, list[str]] = {}
    for f in stage_files:
        part = next((p for p in f.replace("\\", "/").split("/") if p.startswith("stage=")), None)
        if part is not None:
            by_stage.setdefault(part[len("stage="):], []).append(f)
    try:
        conn.execute("SET parquet_metadata_cache = true")  # the same files are opened by many queries
        listed = "[" + ", ".join(_quote(f) for f in pass_files) + "]"
        conn.execute(f"CREATE OR REPLACE VIEW passes AS SELECT {', '.join(PASS_COLUMNS)} FROM read_parquet({listed}, "
                     "hive_partitioning = false, union_by_name = true)")
        for stage_id, fs in by_stage.items():
            listed = "[" + ", ".join(_quote(f) for f in fs) + "]"
            conn.execute(f"CREATE VIEW {stage_view(stage_id)} AS SELECT * FROM read_parquet({listed}, "
                         "hive_partitioning = false, union_by_name = true)")
        conn.execute(f"CREATE VIEW {EXPORT_DATASETS_VIEW} AS SELECT * FROM (VALUES ('passes', {len(pass_files)}), "
                     f"('stages', {len(stage_files)})) AS t(dataset, files)")
        conn.execute("SELECT * FROM passes LIMIT 0")
    except duckdb.Error as exc:
        raise StoreError(f"cannot read the per-pass datasets beside {root}: {str(exc).splitlines()[0]}") from None
    _BOUND[conn] = frozenset(by_stage)
    return pass_files + stage_files


# connection -> the stages its export binds a view for; a connection not in here reads spans only (asked
# with no SQL, so `diagnose` on a store pays nothing for it)
_BOUND: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, frozenset[str]] = weakref.WeakKeyDictionary()


def exported_stages(conn: object) -> frozenset[str] | None:
    """The stages with a typed view when ``conn`` reads an export's per-pass datasets, else None."""
    try:
        return _BOUND.get(conn)  # type: ignore[call-overload]
    except TypeError:  # not weak-referenceable: not a connection this module opened
        return None


# connection -> the table of one row per logical pass its store's writers keep current (a DuckDB store the
# collector writes: tracer/storage/pass_table.py); looked up when a reader opens the store
_PASS_TABLES: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, str] = weakref.WeakKeyDictionary()


def pass_table(conn: object) -> str | None:
    """The relation with one row per logical pass (the ``passes`` view's columns) the store keeps as spans
    arrive, for the analyzers to read instead of building the passes from every pass span's JSON: on
    ClickHouse the ``passes`` view over the materialized ``llmtrace_requests`` (clickhouse.py); in a DuckDB
    store the writer's ``llmtrace_passes`` when it is current. None: build the passes from the spans."""
    name = getattr(conn, "pass_table", None)  # a ClickHouse connection says so itself
    if isinstance(name, str):
        return name
    try:
        return _PASS_TABLES.get(conn)  # type: ignore[call-overload]
    except TypeError:  # not weak-referenceable: not a connection this module opened
        return None


class _Lookup:
    """``kept`` not given: :func:`passes_source` asks the connection (:func:`pass_table`)."""


def window_conditions(since_ns: int | None = None, until_ns: int | None = None) -> list[str]:
    """A time window on ``start_ns`` as SQL conditions: at or after ``since_ns``, before ``until_ns``."""
    where = [] if since_ns is None else [f"start_ns >= {int(since_ns)}"]
    return where if until_ns is None else [*where, f"start_ns < {int(until_ns)}"]


def spans_in_window(spans: str = "spans", since_ns: int | None = None, until_ns: int | None = None,
                    service: str | None = None) -> str:
    """The spans of ``spans`` that started in the window, with ``service`` only those of the traces that
    service took part in (its own spans and the server spans of its traces: the server is another service);
    ``spans`` itself when nothing is asked."""
    where = window_conditions(since_ns, until_ns)
    if service is not None:
        where.append(f"trace_id IN (SELECT trace_id FROM {spans} WHERE service = {_quote(service)})")
    return spans if not where else f"(SELECT * FROM {spans} WHERE {' AND '.join(where)})"


def passes_source(conn: object, spans: str = "spans", json_checked: bool = False, *, since_ns: int | None = None,
                  until_ns: int | None = None, service: str | None = None,
                  kept: str | None | _Lookup = _Lookup()) -> str:
    """The one relation of logical passes every reader takes (analyzers, explorer, report, export,
    ClickHouse): the store's kept pass rows where it has them (:func:`pass_table`; ``kept`` names them
    instead, or None for none), else the ``passes`` view's SELECT over ``spans`` (so a store an older
    version wrote works read-only).

    With a window (``since_ns``/``until_ns``, on the start) and a ``service``: the kept rows of the passes
    that started in it and are the service's; built, the passes of the spans that started in it (of the
    traces the service took part in), those of the service. A bare relation name when nothing is asked of
    kept rows, else a parenthesized relation."""
    from llmtrace.tracer.storage.views import passes_from_spans

    relation = pass_table(conn) if isinstance(kept, _Lookup) else kept
    by_service = [] if service is None else [f"service = {_quote(service)}"]
    if relation is not None:
        where = window_conditions(since_ns, until_ns) + by_service
        return f"(SELECT * FROM {relation} WHERE {' AND '.join(where)})" if where else relation
    built = passes_from_spans(spans_in_window(spans, since_ns, until_ns, service), json_checked)
    return f"(SELECT * FROM {built} WHERE {by_service[0]})" if by_service else built


def bind_pass_table(conn: duckdb.DuckDBPyConnection) -> None:
    """Let ``pass_table`` name the store's ``llmtrace_passes`` for this connection when its writer's stamp says
    it holds the passes of every span now (tracer/storage/pass_table.py); else the passes come from spans."""
    from llmtrace.tracer.storage import pass_table as kept

    relation = kept.kept_relation(conn)
    if relation is not None:
        _PASS_TABLES[conn] = relation


MAX_TRACE_WINDOWS = 20  # more windows than this: one scan by trace id beats a scan a window


def merged_windows(windows: Iterable[tuple[int | None, int | None]]) -> list[tuple[int, int]]:
    """Time ranges (start, end in ns; a None end or start is left out) in order, the overlapping ones joined
    so each is read once."""
    out: list[list[int]] = []
    for lo, hi in sorted((int(lo), int(hi)) for lo, hi in windows if lo is not None and hi is not None):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def windowed_spans_sql(spans: str, literals: str, windows: list[tuple[int, int]]) -> str:
    """The spans of the traces ``literals`` (quoted ids, comma-separated) that started inside one of
    ``windows``, as SQL: a range filter a window, which time-ordered row groups answer from a few of them (a
    filter on the trace id alone reads the id of every span). With no window, or more than
    MAX_TRACE_WINDOWS, one scan by trace id."""
    if windows and len(windows) <= MAX_TRACE_WINDOWS:
        return " UNION ALL ".join(f"SELECT * FROM {spans} WHERE start_ns BETWEEN {lo} AND {hi} "
                                  f"AND trace_id IN ({literals})" for lo, hi in windows)
    return f"SELECT * FROM {spans} WHERE trace_id IN ({literals})"


def trace_spans_sql(conn: duckdb.DuckDBPyConnection, spans: str, trace_ids: list[str]) -> str:
    """The spans of ``trace_ids`` (32-hex ids, checked by the caller) that started inside one of their passes
    (the pass dataset's start and end: a pass's client span encloses its server span, whose stage spans it
    encloses), read once into a temporary table and named. Each trace's window is its own range filter, so
    over the export's stage-clustered, time-ordered row groups the reader opens a few row groups per stage
    instead of every span's JSON; a view such as ``ttft_breakdown`` then reads the small table."""
    literals = ", ".join(_quote(t) for t in trace_ids)
    name = f"_llmtrace_trace_spans_{abs(hash(tuple(trace_ids))):x}"
    windows = conn.execute(f"SELECT min(start_ns), max(end_ns) FROM passes WHERE trace_id IN ({literals}) "
                           "GROUP BY trace_id").fetchall()
    rel = windowed_spans_sql(spans, literals, merged_windows(windows))
    conn.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {rel}")
    return name


def _filter_store(conn: duckdb.DuckDBPyConnection, span_filter: SpanFilter) -> None:
    """Temporary views over the read-only store that show only the filtered spans; they shadow the store's
    own ``spans``, ``deploys`` and views for this connection (the temp schema is searched first)."""
    row = conn.execute("SELECT current_database()").fetchone()
    catalog = '"' + str(row[0] if row else "").replace('"', '""') + '"'
    conn.execute(f"CREATE TEMP VIEW spans AS SELECT * FROM {catalog}.main.spans{span_filter.where()}")
    conn.execute(f"CREATE TEMP VIEW deploys AS SELECT * FROM {catalog}.main.deploys{span_filter.deploys_where()}")
    for stmt in views_sql():
        conn.execute(stmt.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMP VIEW", 1))


def lock_read_only(conn: duckdb.DuckDBPyConnection, allowed_files: list[str] | None = None) -> None:
    """Lock a read connection inside DuckDB: no file, extension or network access except ``allowed_files``
    (the Parquet files the user named; the opened store stays readable), no spilling to a temp directory,
    and no configuration change after this (``SET``/``RESET`` fail)."""
    if allowed_files:
        conn.execute("SET allowed_paths = ?", [allowed_files])
    conn.execute("SET temp_directory = ''")  # a big sort fails instead of writing beside the store
    conn.execute("SET autoinstall_known_extensions = false")
    conn.execute("SET autoload_known_extensions = false")
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")


CLICKHOUSE_SCHEMES = ("chdb", "clickhouse", "http", "https")


def is_clickhouse_url(text: object) -> TypeGuard[str]:
    """Whether a store argument names ClickHouse (tracer/storage/clickhouse.py) rather than a store file."""
    return bool(text) and str(text).split("://", 1)[0] in CLICKHOUSE_SCHEMES and "://" in str(text)


@contextmanager
def read_store(db: str | os.PathLike[str] | None, parquet: str | None = None, *,
               span_filter: SpanFilter | None = None, locked: bool = False,
               store: str | None = None, env_store: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """What the read-only commands query: a Parquet export when ``parquet`` is given, else the store at ``db``
    (default: ``LLMTRACE_DB`` or ./llmtrace.duckdb); closed on exit, StoreError when neither can be read.

    ``store`` (or, for a command that takes ``--store`` (``env_store``), ``LLMTRACE_STORE`` when neither
    ``db`` nor ``parquet`` is given) may name ClickHouse:
    ``clickhouse://HOST:8123/DB`` or ``chdb://PATH`` (tracer/storage/clickhouse.py); any other value is a store file.
    ``span_filter`` limits spans and every view to one service / time window; ``locked`` applies
    ``lock_read_only`` (``llmtrace sql`` runs people's queries on it)."""
    active = span_filter if span_filter and span_filter.where() else None
    url = store or (env("LLMTRACE_STORE") if env_store and db is None and not parquet else None)
    if is_clickhouse_url(url):
        from llmtrace.tracer.storage.clickhouse import open_read

        with open_read(url, span_filter=active, locked=locked) as ch:
            yield ch  # type: ignore[misc]  # DuckDB's connection surface, over ClickHouse
        return
    if url and db is None:
        db = url
    if parquet:
        conn, files = _parquet(parquet, active)
        try:
            if locked:
                lock_read_only(conn, files)
            yield conn
        finally:
            conn.close()
    else:
        from llmtrace.tracer.settings import resolve_db

        with read_connection(resolve_db(db)) as conn:
            if active:
                _filter_store(conn, active)
            elif not locked:  # (a filter changes which spans make a pass; `llmtrace sql` reads no Query)
                bind_pass_table(conn)
            if locked:
                lock_read_only(conn)
            yield conn


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def mark_deploy(path: str | os.PathLike[str], name: str, note: str | None = None, service: str | None = None) -> None:
    with write_connection(path) as conn:
        conn.execute("INSERT INTO deploys VALUES (?, ?, ?, ?)", [name, service, time.time_ns(), note])
