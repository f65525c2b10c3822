"""``llmtrace export --parquet DIR`` writes the ``passes`` view materialised as its own hive-partitioned
dataset beside the spans (DIR.passes), row for row what the store's ``passes`` view holds."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

from llmtrace.cli import main
from llmtrace.tracer.cli.export import passes_dir
from llmtrace.tracer.storage.store import read_connection

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
