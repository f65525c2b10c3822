"""``llmtrace export --parquet``: hive-partitioned files that DuckDB and parquet_connection read back the same."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import llmtrace
from llmtrace.tracer import recording as rec
from llmtrace.tracer.cli.export import export_parquet, parse_since
from llmtrace.tracer.storage.store import parquet_connection, read_connection

DAY1 = int(dt.datetime(2026, 3, 1, 12, tzinfo=dt.timezone.utc).timestamp() * 1e9)
DAY2 = int(dt.datetime(2026, 3, 2, 12, tzinfo=dt.timezone.utc).timestamp() * 1e9)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("export") / "src.duckdb"
    for service, days in (("checkout", (DAY1, DAY2)), ("search/v2", (DAY2,))):
        llmtrace.init(db=db, service_name=service, deploy="d1", strict=True)
        for day in days:
            for i in range(5):
                p = rec.start_pass("smol", side="server", start_ns=day + i * 10**9, attributes={
                    "gen_ai.usage.input_tokens": 100 + i, "gen_ai.usage.cache_read.input_tokens": 50,
                    "llmtrace.ttft_ms": 10.0 + i, "gen_ai.response.finish_reasons": ["stop"],
                    "gen_ai.request.temperature": 0.5})
                rec.record_stage("forward.prefill", start_ns=day + i * 10**9, end_ns=day + i * 10**9 + 5_000_000,
                                 values={"llmtrace.prefill.tokens": 50}, parent=p)
                p.end(end_ns=day + i * 10**9 + 20_000_000)
        llmtrace.shutdown()
    return db


def _requests(conn: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return conn.execute("SELECT * FROM requests ORDER BY span_id").fetchall()


def test_export_layout_and_same_requests(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "parquet"
    r = subprocess.run([sys.executable, "-m", "llmtrace.cli", "export", "--parquet", str(out), "--db", str(store)],
                       capture_output=True, text=True, env=dict(os.environ), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "exported 30 spans over 2 day(s)" in r.stdout
    dirs = sorted(str(p.parent.relative_to(out)) for p in out.rglob("*.parquet"))
    assert dirs == ["date=2026-03-01/service=checkout", "date=2026-03-02/service=checkout",
                    "date=2026-03-02/service=search%2Fv2"]
    glob = str(out / "**" / "*.parquet")
    raw = duckdb.connect()
    assert raw.execute(f"SELECT count(*), count(DISTINCT service) FROM read_parquet('{glob}')").fetchone() == (30, 2)
    with read_connection(store) as conn:
        expected = _requests(conn)
        spans = conn.execute("SELECT * FROM spans ORDER BY span_id").fetchall()
    assert len(expected) == 15
    pq = parquet_connection(glob)
    assert _requests(pq) == expected
    cols = [c[0] for c in pq.execute("SELECT * FROM spans LIMIT 0").description]
    back = pq.execute(f"SELECT {', '.join(c for c in cols if c != 'date')} FROM spans ORDER BY span_id").fetchall()
    names = [c[0] for c in duckdb.connect(str(store), read_only=True).execute("SELECT * FROM spans LIMIT 0").description]
    assert [dict(zip([c for c in cols if c != "date"], row)) for row in back] == [dict(zip(names, row)) for row in spans]


def test_since_append_and_overwrite(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "p"
    assert export_parquet(store, out, since_ns=parse_since("2026-03-02")) == {"spans": 20, "days": 1}
    with pytest.raises(ValueError, match="not empty"):
        export_parquet(store, out)
    assert export_parquet(store, out, append=True)["spans"] == 30
    assert duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{out}/**/*.parquet')").fetchone() == (50,)
    assert export_parquet(store, out, overwrite=True)["spans"] == 30
    assert duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{out}/**/*.parquet')").fetchone() == (30,)
    assert parse_since("2d", now_ns=10 * 86400 * 10**9) == 8 * 86400 * 10**9
    with pytest.raises(ValueError):
        parse_since("last tuesday")


def test_big_days_go_in_slices(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import llmtrace.tracer.cli.export as export_cli

    monkeypatch.setattr(export_cli, "CHUNK_SPANS", 4)  # 10 and 20 spans a day: several slices each
    out = tmp_path / "sliced"
    assert export_parquet(store, out) == {"spans": 30, "days": 2}
    assert len(list(out.rglob("*.parquet"))) > 3
    with read_connection(store) as conn:
        expected = _requests(conn)
    assert _requests(parquet_connection(str(out / "**" / "*.parquet"))) == expected
