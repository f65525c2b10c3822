"""A run of every analyzer in threads (analyzers/core/concurrent_run.py) gives the findings of a run one by one, over
every kind of connection ``diagnose`` opens: a store with and without the writer's kept pass table, a span
filter's temporary views, a Parquet export. A failing analyzer stops the run and leaves nothing attached."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import duckdb
import pytest

from llmtrace.analyzers import ANALYZERS, run_analyzers
from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.concurrent_run import analyze_all
from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.cli import main
from llmtrace.tracer.storage.store import (
    SpanFilter,
    parquet_connection,
    pass_table,
    read_store,
    write_connection,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import PLANTED, make_store  # noqa: E402

from common import keep_pass_table  # noqa: E402


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("concurrent")
    spans = make_store(tmp / "spans.duckdb", passes=600, seed=11)
    kept = tmp / "kept.duckdb"
    shutil.copy(spans, kept)
    keep_pass_table(kept)
    assert main(["export", "--parquet", str(tmp / "export"), "--db", str(spans)]) == 0
    # a kept table that says every prompt was cached: what a run reads from it differs from the spans' passes,
    # so a thread that built the passes from the spans instead would give other findings
    cached = tmp / "cached.duckdb"
    shutil.copy(kept, cached)
    with write_connection(cached) as conn:
        conn.execute("UPDATE llmtrace_passes SET cached_tokens = prompt_tokens, hit_ratio = 1 WHERE prompt_tokens > 0")
    return {"spans": spans, "kept": kept, "cached": cached, "parquet": tmp / "export"}


def _attached(conn: duckdb.DuckDBPyConnection) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall()}


def _temp_tables(conn: duckdb.DuckDBPyConnection) -> list[str]:
    return [str(r[0]) for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()]


@pytest.mark.parametrize("kind", ["spans", "kept", "cached", "filtered"])
def test_threads_give_the_findings_one_by_one_gives(stores: dict[str, Path], kind: str) -> None:
    db = stores["spans" if kind == "filtered" else kind]
    with read_store(db) as conn:
        since = int(conn.execute("SELECT quantile_disc(start_ns, 0.3) FROM spans").fetchone()[0])  # type: ignore[index]
    span_filter = SpanFilter(since_ns=since) if kind == "filtered" else None
    with read_store(db, span_filter=span_filter) as conn:
        assert (pass_table(conn) is not None) == (kind in ("kept", "cached"))
        before = _attached(conn), _temp_tables(conn)
        one_by_one = run_analyzers(conn, threads=1)
        q = Query(conn)
        assert q.shareable()  # so the run below really forks (its attached catalog goes with release)
        q.release()
        at_once = run_analyzers(conn, threads=3)
        assert (_attached(conn), _temp_tables(conn)) == before
    # the planted causes are found, so the comparison means something
    assert len(one_by_one) >= 5 and {f.symptom for f in one_by_one} <= set(PLANTED)
    assert at_once == one_by_one
    if kind == "cached":  # read from the kept table by every thread, not built from the spans by one
        with read_store(stores["kept"]) as conn:
            assert run_analyzers(conn, threads=1) != one_by_one


def test_threads_over_a_parquet_export(stores: dict[str, Path]) -> None:
    conn = parquet_connection(str(stores["parquet"] / "**" / "*.parquet"))
    try:
        assert Query(conn).exported
        one_by_one = run_analyzers(conn, threads=1)
        assert len(one_by_one) >= 5
        assert run_analyzers(conn, threads=3) == one_by_one
    finally:
        conn.close()


def test_the_reads_passes_hint_is_what_each_analyzer_reads(stores: dict[str, Path]) -> None:
    """The hint only orders the work, but a wrong one would make threads wait: each analyzer, run alone on
    the store with every planted cause, reads the pass table exactly when it says it does."""
    wrong = []
    with read_store(stores["spans"]) as conn:
        for symptom, analyzer in ANALYZERS.items():
            q = Query(conn)
            try:
                analyzer.analyze(conn, query=q)
                if q.passes_built != analyzer.reads_passes:
                    wrong.append(f"{symptom}: reads_passes={analyzer.reads_passes}, read={q.passes_built}")
            finally:
                q.release()
    assert not wrong, wrong


class _BrokenAnalyzer(SymptomAnalyzer):
    """An analyzer whose query fails (a column no relation has), after the pass table is built."""

    symptom = "slow_stream"

    def find(self, q: Query) -> list[Finding]:
        q.rows(f"SELECT no_such_column FROM {q.passes}")
        return []


def test_a_failing_analyzer_stops_the_run_and_leaves_nothing_behind(stores: dict[str, Path]) -> None:
    with read_store(stores["spans"]) as conn:
        before = _attached(conn), _temp_tables(conn)
        q = Query(conn)
        try:
            with pytest.raises(duckdb.BinderException, match="no_such_column"):
                analyze_all(q, [*ANALYZERS.values(), _BrokenAnalyzer()], threads=2)
        finally:
            q.release()
        assert (_attached(conn), _temp_tables(conn)) == before
        assert run_analyzers(conn, threads=2) == run_analyzers(conn, threads=1)  # the connection still works


def test_a_duckdb_capped_at_one_thread_runs_them_one_by_one(stores: dict[str, Path]) -> None:
    """The default follows the connection's own ``threads`` setting: a user who capped DuckDB at one core gets
    no analyzer threads (the pass table stays a temporary table of the connection, no catalog is attached)."""
    with read_store(stores["spans"]) as conn:
        for setting, forked in ((1, False), (2, True)):
            conn.execute(f"SET threads = {setting}")
            q = Query(conn)
            try:
                found = analyze_all(q, list(ANALYZERS.values()))
                assert ("." in q.passes) == forked and len(_attached(conn)) == 1 + forked
            finally:
                q.release()
            assert any(found)


class _PoolReader(SymptomAnalyzer):
    """Records the database's DuckDB thread count while it runs among other analyzers."""

    symptom = "slow_stream"
    reads_passes = False

    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    def find(self, q: Query) -> list[Finding]:
        self.seen.append(int(q.one("SELECT current_setting('threads') AS n")["n"]))
        return []


@pytest.mark.parametrize("analyzers", [3, 4])
def test_analyzers_at_once_shrink_the_pool_by_the_threads_they_add(stores: dict[str, Path], analyzers: int) -> None:
    """n analyzers at once each work on DuckDB's pool as well: the pool is cut by n - 1 (at least one thread) for
    the run, and the user's setting is back when it ends, after a failed run too."""
    with read_store(stores["spans"]) as conn:
        conn.execute("SET threads = 4")
        seen: list[int] = []
        q = Query(conn)
        try:
            analyze_all(q, [*ANALYZERS.values(), _PoolReader(seen)], threads=analyzers)
        finally:
            q.release()
        assert seen == [4 - analyzers + 1]
        assert conn.execute("SELECT current_setting('threads')").fetchone() == (4,)
        q = Query(conn)
        try:
            with pytest.raises(duckdb.BinderException):
                analyze_all(q, [*ANALYZERS.values(), _BrokenAnalyzer()], threads=analyzers)
        finally:
            q.release()
        assert conn.execute("SELECT current_setting('threads')").fetchone() == (4,)
