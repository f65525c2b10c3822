"""One relation of logical passes for every reader (issue 34): ``passes_source(conn)`` is the store's kept pass
rows where the writer keeps them current, else the ``passes`` view's SELECT over the spans, spelled once
(``passes_from_spans``). Both give the rows of the documented ``passes`` view."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmtrace.tracer.storage import pass_table
from llmtrace.tracer.storage.store import bind_pass_table, passes_source, read_connection, write_connection
from llmtrace.tracer.storage.views import passes_from_spans

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from synthetic_store import make_store  # noqa: E402

COLS = "trace_id, span_id, client_span_id, server_span_id, deploy, prompt_tokens, cached_tokens, ttft_ms, finish_reason"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("ps") / "s.duckdb", passes=40, seed=3)


def _rows(conn: object, rel: str) -> list[tuple]:
    return conn.execute(f"SELECT {COLS} FROM {rel} ORDER BY span_id").fetchall()  # type: ignore[attr-defined]


def test_without_kept_rows_the_source_is_the_view_built_over_the_spans(db: Path) -> None:
    with read_connection(db) as conn:
        source = passes_source(conn)
        assert source == passes_from_spans("spans")
        rows = _rows(conn, source)
        assert rows == _rows(conn, "passes") and len(rows) >= 40


def test_kept_rows_are_read_where_the_store_keeps_them_current(db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "kept.duckdb"
    copy.write_bytes(db.read_bytes())
    with write_connection(copy) as conn:
        pass_table.rebuild(conn)
    with read_connection(copy) as conn:
        bind_pass_table(conn)
        source = passes_source(conn)
        assert source == pass_table.PASSES_TABLE
        assert _rows(conn, source) == _rows(conn, passes_from_spans())
