"""A synthetic store twice, for the ClickHouse tests: in DuckDB (benchmarks/synthetic_store.py) and in chdb,
where the same spans fill the OpenTelemetry Collector exporter's ``otel_traces`` (copied through Parquet, as
``llmtrace export`` hands them over). Import it after ``pytest.importorskip("chdb")``."""

from __future__ import annotations

import sys
from pathlib import Path

from llmtrace.tracer.storage.clickhouse import connect, ensure_views, insert_from_parquet_sql
from llmtrace.tracer.storage.store import read_connection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import make_store  # noqa: E402


def synthetic_pair(tmp: Path, passes: int, seed: int) -> tuple[Path, Path]:
    """(the DuckDB store, the chdb data folder) under ``tmp``, both holding one synthetic store's spans;
    ``chdb://<folder>`` opens the second."""
    db = make_store(tmp / "syn.duckdb", passes=passes, seed=seed)
    pq = tmp / "spans.parquet"
    with read_connection(db) as conn:
        conn.execute(f"COPY (SELECT * FROM spans) TO '{pq}' (FORMAT parquet)")
    folder = tmp / "ch"
    with connect(f"chdb://{folder}") as ch:
        ensure_views(ch, create_table=True)
        ch.raw(insert_from_parquet_sql(str(pq)))
    return db, folder
