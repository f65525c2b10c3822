"""``llmtrace export --parquet DIR`` writes the ``passes`` view materialised as its own hive-partitioned
dataset beside the spans (DIR.passes), row for row what the store's ``passes`` view holds."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import duckdb
import pytest

from llmtrace.cli import main
from llmtrace.tracer.cli.export import passes_dir
from llmtrace.tracer.storage import pass_table
from llmtrace.tracer.storage.store import bind_pass_table, passes_source, read_connection, write_connection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import make_store  # noqa: E402


def test_export_writes_the_passes_beside_the_spans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = make_store(tmp_path / "s.duckdb", passes=200, seed=3)
    out = tmp_path / "traces"
    assert main(["export", "--parquet", str(out), "--db", str(db)]) == 0
    assert "exported 200 passes" in capsys.readouterr().out
    pdir = passes_dir(out)
    assert pdir == tmp_path / "traces.passes"
    files = sorted(pdir.rglob("*.parquet"))
    assert files and all(f.name.startswith("passes_") and f.parent.parent.name.startswith("date=") for f in files)
    assert not any(p.name.startswith("passes_") for p in out.rglob("*.parquet"))  # the spans' glob stays spans
    with read_connection(db) as conn:
        cols = [c[0] for c in conn.execute("SELECT * FROM passes LIMIT 0").description]
        expected = conn.execute("SELECT * FROM passes ORDER BY span_id").fetchall()
    got = duckdb.connect().execute(
        f"SELECT {', '.join(cols)} FROM read_parquet('{pdir}/**/*.parquet', hive_partitioning = false) "
        "ORDER BY span_id").fetchall()
    assert len(expected) == 200 and got == expected
    # a second export refuses to mix, --overwrite replaces both datasets
    assert main(["export", "--parquet", str(out), "--db", str(db)]) == 1
    assert main(["export", "--parquet", str(out), "--db", str(db), "--overwrite"]) == 0
    assert duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{pdir}/**/*.parquet')").fetchone() == (200,)


def test_a_store_s_kept_passes_export_as_the_view_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Where the writer keeps the pass rows current, export reads them (passes_source, as diagnose does) instead
    of building every pass from the spans' JSON: the dataset is the same, whole and over a --since window,
    column for column in the view's order."""
    db = make_store(tmp_path / "s.duckdb", passes=120, seed=5)
    with write_connection(db) as conn:
        pass_table.rebuild(conn)
    with read_connection(db) as conn:
        bind_pass_table(conn)
        assert passes_source(conn) == pass_table.PASSES_TABLE  # the export below reads the kept rows
        cols = [c[0] for c in conn.execute("SELECT * FROM passes LIMIT 0").description]
        starts = [r[0] for r in conn.execute("SELECT start_ns FROM passes ORDER BY start_ns").fetchall()]
        # the middle pass's start to the microsecond (--since takes a date/time; the store's passes may all
        # lie within one second)
        since_us = starts[len(starts) // 2] // 1000 + 1
        whole = conn.execute("SELECT * FROM passes ORDER BY span_id").fetchall()
        windowed = conn.execute(f"SELECT * FROM passes WHERE start_ns >= {since_us * 1000} ORDER BY span_id").fetchall()
    since = (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=since_us)).isoformat()
    for name, args, expected in (("whole", [], whole), ("since", ["--since", since], windowed)):
        out = tmp_path / name
        assert main(["export", "--parquet", str(out), "--db", str(db), *args]) == 0
        assert f"exported {len(expected)} passes" in capsys.readouterr().out
        got = duckdb.connect().execute(
            f"SELECT * EXCLUDE (date) FROM read_parquet('{passes_dir(out)}/**/*.parquet', hive_partitioning = false) "
            "ORDER BY span_id")
        assert [c[0] for c in got.description] == cols and got.fetchall() == expected, name
    assert 0 < len(windowed) < len(whole)
    # the rows came from the kept table: a mark put there (the pass spans' stamp still current) is exported
    with write_connection(db) as conn:
        conn.execute(f"UPDATE {pass_table.PASSES_TABLE} SET model = 'marked-in-the-kept-table'")
    assert main(["export", "--parquet", str(tmp_path / "marked"), "--db", str(db)]) == 0
    models = duckdb.connect().execute(f"SELECT DISTINCT model FROM read_parquet('{passes_dir(tmp_path / 'marked')}"
                                      "/**/*.parquet')").fetchall()
    assert models == [("marked-in-the-kept-table",)]
