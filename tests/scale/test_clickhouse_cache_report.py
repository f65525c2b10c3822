"""The Cache tab over ClickHouse: it reads the ``passes`` view over the materialized ``llmtrace_requests`` (the
relation the analyzers read there) rather than the spans' JSON, and its "temporary" table, a Memory table every
client of the database sees, is dropped even when the report fails half-way. Through the real
clickhouse-connect client against the loopback chdb endpoint (tests/scale/chdb_http.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("chdb")
pytest.importorskip("clickhouse_connect")

from llmtrace.tracer.storage.store import StoreError  # noqa: E402
from llmtrace.tui.data.store_reader import StoreReader  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from chdb_http import ChdbHTTP  # noqa: E402
from chdb_store import synthetic_pair  # noqa: E402


def _memory_tables(server: ChdbHTTP) -> list[str]:
    out = server.sess.query("SELECT name FROM system.tables WHERE database = 'llmtrace' AND engine = 'Memory'", "CSV")
    return [line.strip('"') for line in str(out).split()]


def test_cache_report_reads_passes_and_leaves_no_table_when_it_fails(tmp_path: Path) -> None:
    db, _ = synthetic_pair(tmp_path, passes=60, seed=5)
    want = StoreReader(db).cache_report(buckets=20)
    server = ChdbHTTP(str(tmp_path / "ch"))
    with server as port:
        reader = StoreReader(f"clickhouse://127.0.0.1:{port}/llmtrace")
        try:
            reader.check()
            first = len(server.queries)
            got = reader.cache_report(buckets=20)
            made = [q for q in server.queries[first:] if q.startswith("CREATE OR REPLACE TABLE tui_passes_")]
            assert len(made) == 1 and "FROM passes" in made[0] and "JSON" not in made[0].upper(), made
            assert [(c.deploy, c.passes) for c in got.costs] == [(c.deploy, c.passes) for c in want.costs]
            assert [round(c.hit_rate or 0, 9) for c in got.costs] == [round(c.hit_rate or 0, 9) for c in want.costs]
            assert _memory_tables(server) == []
            # the report reads the deploy marks after it made its table: take them away under the kept connection
            server.sess.query("DROP TABLE llmtrace.deploys")
            with pytest.raises(StoreError):
                reader.cache_report(buckets=20)
            assert _memory_tables(server) == [], "the failed report left its Memory table on the server"
        finally:
            reader.close()
