"""``llmtrace diagnose --parquet`` over an export reads the per-pass datasets export writes beside the spans
(DIR.passes: one row a pass; DIR.stages: stage spans with their declared values as typed columns) and gives
the findings ``diagnose`` gives on the store the export came from."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from llmtrace.analyzers.core.query import Query
from llmtrace.cli import main
from llmtrace.tracer.cli.export import passes_dir, stages_dir
from llmtrace.tracer.storage.store import parquet_connection, read_connection, stage_view

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import PLANTED, make_store  # noqa: E402


def _diagnose(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    capsys.readouterr()
    assert main(["diagnose", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)["findings"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("pq")
    db = make_store(tmp / "s.duckdb", passes=600, seed=5)
    assert main(["export", "--parquet", str(tmp / "traces"), "--db", str(db)]) == 0
    return db, tmp / "traces"


def test_diagnose_parquet_gives_the_store_findings(exported: tuple[Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db, out = exported
    on_store = _diagnose(capsys, "--db", str(db))
    on_parquet = _diagnose(capsys, "--parquet", str(out / "**" / "*.parquet"))
    # the planted causes are found, so the comparison means something
    assert len(on_store) >= 10 and {"broken_json", "slow_stream", "different_answer"} <= {
        str(f["symptom"]) for f in on_store} and set(PLANTED) >= {str(f["symptom"]) for f in on_store}
    assert on_parquet == on_store
    # a window: the pass rows and stage rows that started in it, as the store's windowed spans give
    with read_connection(db) as conn:
        since = str(conn.execute("SELECT quantile_disc(start_ns, 0.5) FROM passes").fetchone()[0])  # type: ignore[index]
    windowed = _diagnose(capsys, "--db", str(db), "--since", since)
    assert windowed != on_store
    assert _diagnose(capsys, "--parquet", str(out / "**" / "*.parquet"), "--since", since) == windowed


def test_the_analyzers_read_the_datasets_not_the_spans(exported: tuple[Path, Path]) -> None:
    _db, out = exported
    assert any(stages_dir(out).glob("stage=gen.stop/date=*/service=*/stages_*.parquet"))
    conn = parquet_connection(str(out / "**" / "*.parquet"))
    try:
        q = Query(conn)
        assert q.exported
        assert "FROM (SELECT * FROM passes)" in f"FROM {q.passes}" and "spans" not in q.passes
        rel = q.stage_sql("gen.stop", {"matched": ("llmtrace.stop.matched", "str")})
        assert stage_view("gen.stop") in rel and "json" not in rel
        # the typed column holds what the span's JSON holds
        typed = conn.execute(f"SELECT span_id, matched FROM {rel} ORDER BY span_id").fetchall()
        raw = conn.execute("SELECT span_id, json_extract_string(attributes, '$.\"llmtrace.stop.matched\"') "
                           "FROM spans WHERE stage = 'gen.stop' ORDER BY span_id").fetchall()
        assert typed == raw and len(typed) == 600
        # a value the registry does not declare for the stage is still read, from the spans' JSON
        rel = q.stage_sql("gen.stop", {"x": ("llmtrace.not.declared", "int")})
        assert stage_view("gen.stop") not in rel
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone() == (600,)
        # the pass rows are the store's pass rows
        assert conn.execute("SELECT count(*), count(DISTINCT trace_id) FROM passes").fetchone() == (600, 600)
    finally:
        conn.close()


def test_an_export_without_the_datasets_reads_the_spans(exported: tuple[Path, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """An export an earlier version wrote (spans only) still answers, from the spans, the same findings."""
    db, out = exported
    old = tmp_path / "old"
    shutil.copytree(out, old)
    assert not passes_dir(old).exists()
    conn = parquet_connection(str(old / "**" / "*.parquet"))
    try:
        assert not Query(conn).exported
    finally:
        conn.close()
    assert _diagnose(capsys, "--parquet", str(old / "**" / "*.parquet")) == _diagnose(capsys, "--db", str(db))


def test_check_parquet_measures_what_check_measures_on_the_store(exported: tuple[Path, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db, out = exported
    assert main(["check", "--db", str(db), "--save-baseline", str(tmp_path / "store.json")]) == 0
    assert main(["check", "--parquet", str(out / "**" / "*.parquet"),
                 "--save-baseline", str(tmp_path / "parquet.json")]) == 0
    store = json.loads((tmp_path / "store.json").read_text())
    parquet = json.loads((tmp_path / "parquet.json").read_text())
    assert store.pop("created") and parquet.pop("created")
    assert store["passes"] == 600 and parquet == store
    # the gate itself over the export: the planted v2 regression fails it, as on the store
    assert main(["check", "--parquet", str(out / "**" / "*.parquet"), "--baseline-deploy", "previous"]) == 1
    assert main(["check", "--db", str(db), "--baseline-deploy", "previous"]) == 1


def test_a_partition_filter_in_the_glob_reads_the_spans(exported: tuple[Path, Path]) -> None:
    """A glob that picks some partitions (one service, some days) picks spans the whole-export datasets do
    not follow, so the spans answer."""
    _db, out = exported
    day = next(out.glob("date=*")).name
    conn = parquet_connection(str(out / day / "**" / "*.parquet"))
    try:
        assert not Query(conn).exported
        assert conn.execute("SELECT count(*) FROM passes").fetchone() == (600,)
    finally:
        conn.close()


def test_an_export_older_than_a_declared_value_reads_it_as_missing(exported: tuple[Path, Path], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A value declared after an export was written has no column in its stage dataset: the analyzers read
    it as absent (as on spans that do not carry it) instead of failing on the column."""
    import duckdb

    db, out = exported
    old = tmp_path / "older"
    for src, dst in ((out, old), (passes_dir(out), passes_dir(old)), (stages_dir(out), stages_dir(old))):
        shutil.copytree(src, dst)
    files = list(stages_dir(old).glob("stage=gen.stop/**/*.parquet"))
    assert files
    for f in files:  # rewrite gen.stop's dataset as an export made before llmtrace.stop.matched existed
        tmp = f.with_suffix(".tmp")
        duckdb.execute(f"COPY (SELECT * EXCLUDE (\"llmtrace.stop.matched\") FROM read_parquet('{f}')) "
                       f"TO '{tmp}' (FORMAT parquet)")
        tmp.replace(f)
    older = _diagnose(capsys, "--parquet", str(old / "**" / "*.parquet"))  # exits 0: no binder error
    full = _diagnose(capsys, "--parquet", str(out / "**" / "*.parquet"))
    # what needs the missing value (the stop-string window) goes; every other finding is as it was
    assert older and all(f in full for f in older)
    assert {str(f["symptom"]) for f in full} - {str(f["symptom"]) for f in older} == {"detokenizer_window"}
