"""The store writer's connection: one DuckDB instance for the writer thread's life, the store file attached to
it for each batch and detached after.

``store.write_connection`` opens a new DuckDB database instance every time, and building one (its catalog of
built-in functions) costs ~15 ms of CPU whatever the file holds: the writer paid it on every batch, five
times a second for an app's exporter and once a batch for ``llmtrace collect``. ``ATTACH`` of the file on an
instance kept open costs ~2 ms, and ``DETACH`` checkpoints and releases the file as closing a connection does
(so ``llmtrace sql`` and ``explore``, other processes, open it between batches as before). Under ``USE`` the
attached store is the default catalog, so every statement of the batch (the insert, the pass table, the
collector's join, retention) reads and writes it by the same unqualified names as on a connection of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from llmtrace.tracer.storage.store import StoreBusy, StoreError, ensure_schema
from llmtrace.tracer.storage.store import _explain as explain
from llmtrace.tracer.storage.store import _is_lock_error as is_lock_error

ALIAS = "llmtrace_store"


class AttachedStore:
    """``open()`` is ``write_connection(path, timeout_s=0.0)`` (one try: a store another process holds is
    StoreBusy, one that cannot be a store is StoreError) on a DuckDB instance that lives on between calls.
    One thread uses it at a time (the writer's)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._conn: duckdb.DuckDBPyConnection | None = None

    @contextmanager
    def open(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if not self.path.parent.exists():
            raise StoreError(f"directory {self.path.parent} does not exist")
        conn = self._conn
        if conn is None:
            conn = self._conn = duckdb.connect(":memory:")
        literal = str(self.path).replace("'", "''")
        try:
            conn.execute(f"ATTACH '{literal}' AS {ALIAS}")
        except duckdb.Error as exc:
            if is_lock_error(exc):
                raise StoreBusy(f"store {self.path} is locked by another process") from None
            raise StoreError(explain(self.path, exc)) from None
        try:
            conn.execute(f"USE {ALIAS}")
            ensure_schema(conn)
            yield conn
        finally:
            self._detach(conn)

    def _detach(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Checkpoint and release the file; an instance that cannot let it go is closed (which does), and the
        next batch builds a fresh one."""
        try:
            conn.execute("USE memory")
            conn.execute(f"DETACH {ALIAS}")
        except duckdb.Error:
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
