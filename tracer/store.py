"""Opening the DuckDB store: schema on first write, short connections, retry while another process holds it.

DuckDB lets one process hold a file at a time (a second cannot open it, even read-only), so every
llmtrace process — app exporters, the collector, ``llmtrace sql`` and ``explore`` — opens the store for
a short moment and closes it again, retrying with jittered backoff while the file is busy.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from .schema import SCHEMA_VERSION, TABLES_SQL, views_sql


class StoreError(RuntimeError):
    """The store cannot be used: a clear message for people, never a DuckDB traceback."""


class StoreBusy(StoreError):
    """Another process kept the store locked for longer than we were willing to wait."""


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    # Across processes DuckDB reports a file lock; inside one process a read-only and a read-write
    # connection to the same file conflict as "different configuration" until the other one closes.
    return ("lock" in text or "conflicting" in text or "resource temporarily unavailable" in text
            or "different configuration" in text)


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
                raise StoreBusy(f"store {path} is locked by another process (waited {timeout_s:.0f}s)") from None
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.1)


def _explain(path: Path, exc: Exception) -> str:
    text = str(exc)
    if "not a valid DuckDB database" in text or "Corrupt" in text or "corrupt" in text or "magic" in text.lower():
        return f"{path} is not a readable llmtrace store (corrupt or not a DuckDB file): {text.splitlines()[0]}"
    return f"cannot open store {path}: {text.splitlines()[0]}"


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
    """A short read-only connection. A missing store is a clear error, not an empty new file."""
    p = Path(path)
    if not p.exists():
        raise StoreError(f"no store at {p} (run your app with llmtrace.init(), `llmtrace demo`, or pass --db)")
    conn = _open(p, read_only=True, timeout_s=timeout_s)
    try:
        yield conn
    finally:
        conn.close()


def parquet_connection(glob: str) -> duckdb.DuckDBPyConnection:
    """An in-memory connection whose ``spans`` and views read a Parquet export (local or object storage)."""
    conn = duckdb.connect(":memory:")
    try:
        conn.execute(f"CREATE VIEW spans AS SELECT * FROM read_parquet({_quote(glob)}, hive_partitioning = true, hive_types_autocast = false, union_by_name = true)")
    except duckdb.Error as exc:
        conn.close()
        raise StoreError(f"cannot read Parquet {glob}: {str(exc).splitlines()[0]}") from None
    conn.execute("CREATE TABLE deploys (name VARCHAR, service VARCHAR, at_ns BIGINT, note VARCHAR)")
    for stmt in views_sql():
        conn.execute(stmt)
    return conn


@contextmanager
def read_store(db: str | os.PathLike[str] | None, parquet: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """What the read-only commands query: a Parquet export when ``parquet`` is given, else the store at ``db``
    (default: ``LLMTRACE_DB`` or ./llmtrace.duckdb); closed on exit, StoreError when neither can be read."""
    if parquet:
        conn = parquet_connection(parquet)
        try:
            yield conn
        finally:
            conn.close()
    else:
        from .settings import resolve_db

        with read_connection(resolve_db(db)) as conn:
            yield conn


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def mark_deploy(path: str | os.PathLike[str], name: str, note: str | None = None, service: str | None = None) -> None:
    with write_connection(path) as conn:
        conn.execute("INSERT INTO deploys VALUES (?, ?, ?, ?)", [name, service, time.time_ns(), note])
