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


def _window(conn: object) -> tuple[int, int, str]:
    """A time window over the middle of the store's passes and the service of most of its passes."""
    starts = [r[0] for r in conn.execute("SELECT start_ns FROM passes ORDER BY start_ns").fetchall()]  # type: ignore[attr-defined]
    service = conn.execute("SELECT service FROM passes GROUP BY 1 ORDER BY count(*) DESC LIMIT 1").fetchone()[0]  # type: ignore[attr-defined]
    return starts[len(starts) // 4], starts[3 * len(starts) // 4], str(service)


def test_a_window_is_the_passes_that_started_in_it_kept_or_built(db: Path, tmp_path: Path) -> None:
    """The analyzers' run, export and the explorer take their window through ``passes_source``: kept rows
    filtered by their start (and service), or the passes of the spans that started in it; on a store whose
    passes lie inside their traces' windows both give the rows of the ``passes`` view in that window."""
    copy = tmp_path / "kept.duckdb"
    copy.write_bytes(db.read_bytes())
    with write_connection(copy) as conn:
        pass_table.rebuild(conn)
    with read_connection(copy) as conn:
        since, until, service = _window(conn)
        bind_pass_table(conn)
        cases = {"since": {"since_ns": since}, "until": {"until_ns": until},
                 "both": {"since_ns": since, "until_ns": until},
                 "service": {"since_ns": since, "until_ns": until, "service": service},
                 "no such service": {"service": "no-such-service"}}
        for name, window in cases.items():
            kept = passes_source(conn, **window)  # type: ignore[arg-type]
            built = passes_source(conn, kept=None, **window)  # type: ignore[arg-type]
            assert pass_table.PASSES_TABLE in kept and pass_table.PASSES_TABLE not in built, name
            where = [f"start_ns >= {since}"] if "since_ns" in window else []
            where += [f"start_ns < {until}"] if "until_ns" in window else []
            where += [f"service = '{window['service']}'"] if "service" in window else []
            want = _rows(conn, f"(SELECT * FROM passes WHERE {' AND '.join(where)})")
            assert _rows(conn, kept) == want and _rows(conn, built) == want, name
            assert (len(want) == 0) == (name == "no such service"), name
        assert len(_rows(conn, passes_source(conn, since_ns=since, until_ns=until))) < len(_rows(conn, "passes"))
