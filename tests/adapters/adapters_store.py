"""Reading what the tests recorded: flush, then short read-only connections to the store files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import llmtrace
from llmtrace.tracer.storage.store import read_connection


def rows(db: Path, sql: str, params: list[object] | None = None) -> list[dict[str, Any]]:
    llmtrace.force_flush()
    with read_connection(db) as conn:
        cur = conn.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        out = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    for r in out:
        for k in ("attributes", "boundary_values"):
            if isinstance(r.get(k), str):
                r[k] = json.loads(r[k])
    return out


def client_pass(db: Path) -> dict[str, Any]:
    """The one client pass span in the store (tests use a fresh store each)."""
    found = rows(db, "SELECT * FROM requests WHERE side = 'client' ORDER BY start_ns")
    assert len(found) == 1, f"expected one client pass, found {len(found)}"
    return found[0]


def stages_of(db: Path, span_id: str) -> dict[str, dict[str, Any]]:
    """Stage spans under a pass span, by stage id."""
    return {
        r["stage"]: r
        for r in rows(db, "SELECT * FROM spans WHERE parent_span_id = ? AND stage IS NOT NULL", [span_id])
    }


def wait_for(db: Path, sql: str, params: list[object], timeout_s: float = 15.0) -> list[dict[str, Any]]:
    """Poll another process's store until the query returns rows (its exporter writes in batches)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = rows(db, sql, params)
        except Exception:
            found = []
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def assert_no_text(db: Path, *texts: str) -> None:
    """No prompt or output text (any piece of 12+ characters) appears in any row of the store."""
    llmtrace.force_flush()
    with read_connection(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        dump = "\n".join(str(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"').fetchall())
    assert dump, "the store is empty: nothing to check"
    for text in texts:
        for i in range(0, max(len(text) - 12, 0) + 1, 6):
            piece = text[i : i + 12]
            if len(piece.strip()) >= 8:
                assert piece not in dump, f"text {piece!r} found in the store"
