"""The per-pass table in ClickHouse: a materialized view fills ``llmtrace_requests`` (one typed row per pass span)
as spans reach ``otel_traces``, the ``passes`` view joins its two sides, and the analyzers read it instead of
building passes from every pass span's JSON; the findings stay those of the DuckDB store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("chdb")  # in the dev extra; a checkout without it cannot run ClickHouse at all

from llmtrace.analyzers import run_analyzers  # noqa: E402
from llmtrace.tracer.storage.clickhouse import (  # noqa: E402
    REQUESTS_TABLE,
    connect,
    ensure_views,
    insert_from_parquet_sql,
)
from llmtrace.tracer.storage.store import pass_table, read_connection  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import make_store  # noqa: E402

PASS_SQL = ("SELECT trace_id, span_id, client_span_id, server_span_id, observed_by, deploy, prompt_tokens, "
            "cached_tokens, ttft_ms, finish_reason FROM passes ORDER BY span_id")


def _key(findings: list) -> list[tuple]:
    # which five traces a finding quotes may differ between engines (rows of a query without ORDER BY)
    return sorted((f.symptom, f.stage, f.title, f.summary, len(f.trace_ids),
                   tuple((e.label, str(e.value), e.unit, str(e.baseline)) for e in f.evidence)) for f in findings)


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A DuckDB store, and a ClickHouse store that got its spans in two inserts after the views existed:
    the client spans and the stage spans first, the server pass spans later (a pass's two sides in two
    inserts, as two Collector batches deliver them)."""
    tmp = tmp_path_factory.mktemp("chp")
    db = make_store(tmp / "syn.duckdb", passes=150, seed=5)
    first, later = tmp / "a.parquet", tmp / "b.parquet"
    server = "operation IN ('chat', 'text_completion', 'generate_content') AND attributes->>'$.\"llmtrace.side\"' = 'server'"
    with read_connection(db) as conn:
        conn.execute(f"COPY (SELECT * FROM spans WHERE NOT coalesce({server}, false)) TO '{first}' (FORMAT parquet)")
        conn.execute(f"COPY (SELECT * FROM spans WHERE {server}) TO '{later}' (FORMAT parquet)")
    url = f"chdb://{tmp / 'ch'}"
    with connect(url) as ch:
        ensure_views(ch, create_table=True)  # the materialized views exist before any span arrives
        assert ch.execute(f"SELECT count(*) FROM {REQUESTS_TABLE}").fetchone() == (0,)
        ch.raw(insert_from_parquet_sql(str(first)))
        ch.raw(insert_from_parquet_sql(str(later)))
        assert ch.execute("SELECT count(*) FROM spans").fetchone() == (150 * 40,)
    return db, url


def test_materialized_view_fills_the_pass_table_as_spans_arrive(split: tuple[Path, str]) -> None:
    db, url = split
    with read_connection(db) as conn:
        want_requests = conn.execute("SELECT count(*), count(DISTINCT side) FROM requests").fetchone()
        want_passes = conn.execute(PASS_SQL).fetchall()
    with connect(url) as ch:
        assert ch.execute(f"SELECT count(*), count(DISTINCT side) FROM {REQUESTS_TABLE}").fetchone() == want_requests
        assert want_requests[0] == 300 and want_requests[1] == 2
        got = ch.execute(PASS_SQL).fetchall()
    # the two sides of every pass, which arrived in two inserts, are one pass again
    assert got == want_passes and {r[4] for r in got} == {"both"}


def test_analyzers_read_the_pass_table_and_find_what_duckdb_finds(split: tuple[Path, str]) -> None:
    db, url = split
    with read_connection(db) as conn:
        assert pass_table(conn) is None  # a store no collector kept passes for: passes built from spans
        duck = run_analyzers(conn)
    sent: list[str] = []
    with connect(url) as ch:
        ensure_views(ch)
        assert pass_table(ch) == "passes"
        send = ch._send
        ch._send = lambda sql: (sent.append(sql), send(sql))[1]  # the statements ClickHouse is asked to run
        on_ch = run_analyzers(ch)
    assert len(duck) >= 8 and _key(on_ch) == _key(duck)
    made = [s for s in sent if s.startswith("CREATE OR REPLACE TABLE _llmtrace_passes_")]
    # the run's pass rows came off the passes view over the table, not out of the spans' JSON
    assert made and all(" FROM passes" in s and "JSONExtract" not in s for s in made)


def test_a_spans_table_without_the_pass_table_is_filled_once(split: tuple[Path, str]) -> None:
    """A ClickHouse store an older llmtrace prepared (llmtrace_spans, no pass table): the next reader makes the
    table and its materialized view, and copies the pass spans already there in once."""
    _, url = split
    with connect(url) as ch:
        want = ch.execute("SELECT count(*), sum(prompt_tokens) FROM passes").fetchone()
        ch.raw(f"DROP VIEW {REQUESTS_TABLE}_mv")
        ch.raw(f"DROP TABLE {REQUESTS_TABLE}")
        ensure_views(ch)
        assert ch.execute("SELECT count(*), sum(prompt_tokens) FROM passes").fetchone() == want
        assert ch.execute(f"SELECT count(*) FROM {REQUESTS_TABLE}").fetchone() == (300,)
