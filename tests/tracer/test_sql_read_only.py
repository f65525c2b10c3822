"""`llmtrace sql` is read-only because DuckDB enforces it: every escape shape below goes through the real CLI
(``llmtrace.cli.main``, a few through a subprocess) and is refused with one line, exit 2, the store's bytes and
rows unchanged and no file written anywhere the test can see."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import llmtrace
from llmtrace.cli import main
from llmtrace.tracer import recording as rec

# {store}: the store, {cat}: its catalog name, {other}: another DuckDB file, {victim}: a directory that must stay
# empty, {outside}: a Parquet file that exists but was not named with --parquet.
ESCAPES = [
    "EXPLAIN ANALYZE COPY (SELECT 'x') TO '{victim}/x.sh'",
    "/**/EXPLAIN ANALYZE COPY (SELECT 'x') TO '{victim}/x.sh'",
    "--\nEXPLAIN ANALYZE COPY (SELECT 'x') TO '{victim}/x.sh'",
    "EXPLAIN (ANALYZE) SELECT 1",
    "explain analyse select 1",
    "EXPLAIN (FORMAT json, ANALYZE) SELECT 1",
    "EXPLAIN DELETE FROM spans",
    "EXPLAIN COPY spans TO '{victim}/x.csv'",
    "/**/ATTACH '{other}' AS s (READ_ONLY false); /**/USE s; /**/DETACH {cat}; "
    "/**/ATTACH '{store}' AS w (READ_ONLY false); /**/DELETE FROM w.spans",
    "/**/ATTACH '{store}' AS w (READ_ONLY false)",
    "ATTACH '{victim}/new.duckdb' AS n",
    "ATTACH 'md:'",
    "/**/DETACH {cat}",
    "DETACH DATABASE IF EXISTS {cat}",
    "USE memory",
    "/**/EXPORT DATABASE '{victim}/exp'",
    "IMPORT DATABASE '{victim}'",
    "COPY FROM DATABASE {cat} TO memory",
    "/**/INSTALL httpfs",
    "FORCE INSTALL httpfs FROM 'http://127.0.0.1:9'",
    "LOAD httpfs",
    "LOAD '{victim}/evil.duckdb_extension'",
    "PRAGMA version",
    "PRAGMA profile_output = '{victim}/profile.json'",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET enable_external_access",
    "SET GLOBAL allowed_directories = ['/']",
    "SET temp_directory = '{victim}'",
    "SET VARIABLE x = 1",
    "COPY spans TO '{victim}/spans.csv'",
    "COPY (SELECT * FROM spans) TO '{victim}/spans.parquet' (FORMAT parquet)",
    "COPY deploys FROM '{victim}/in.csv'",
    "--\nCOPY spans TO '{victim}/x.csv'",
    "/* a */ -- b\n DELETE FROM spans",
    "dElEtE fRoM spans",
    "  \n\t INSERT INTO deploys SELECT * FROM deploys",
    "WITH d AS (DELETE FROM spans RETURNING *) SELECT count(*) FROM d",
    "WITH i AS (INSERT INTO deploys VALUES ('x', NULL, 1, NULL) RETURNING *) SELECT * FROM i",
    "WITH u AS MATERIALIZED (UPDATE spans SET name = 'x' RETURNING *) SELECT 1",
    "EXPLAIN WITH d AS (DELETE FROM spans RETURNING *) SELECT * FROM d",
    "SUMMARIZE (WITH d AS (DELETE FROM spans RETURNING *) SELECT * FROM d)",
    "SELECT * FROM (WITH d AS (DELETE FROM spans RETURNING *) SELECT * FROM d) t",
    "SELECT 1; DELETE FROM spans",
    "SELECT 1; DROP TABLE spans",
    "SELECT 1;/**/CREATE TABLE t AS SELECT 1",
    "SELECT * FROM spans; ATTACH ':memory:' AS m",
    "CREATE TABLE t (a INT)",
    "CREATE TEMP TABLE t AS SELECT * FROM spans",
    "CREATE VIEW v AS SELECT 1",
    "CREATE OR REPLACE VIEW requests AS SELECT 1",
    "CREATE MACRO m() AS 1",
    "CREATE SECRET s (TYPE s3, KEY_ID 'x', SECRET 'y')",
    "CREATE SEQUENCE q",
    "CREATE TYPE t AS ENUM ('a')",
    "INSERT INTO deploys VALUES ('x', NULL, 1, NULL)",
    "INSERT OR REPLACE INTO llmtrace_meta VALUES ('schema_version', '0')",
    "DELETE FROM spans",
    "UPDATE spans SET name = 'x'",
    "UPDATE llmtrace_meta SET value = '0'",
    "DROP VIEW requests",
    "ALTER TABLE spans ADD COLUMN x INT",
    "TRUNCATE spans",
    "MERGE INTO deploys USING (SELECT 1 AS a) s ON true WHEN MATCHED THEN DELETE",
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    "ANALYZE",
    "CALL checkpoint()",
    "BEGIN TRANSACTION",
    "PREPARE p AS DELETE FROM spans",
    "EXECUTE p",
    "PIVOT spans ON name",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd', header = false)",
    "SELECT * FROM read_json('/etc/hostname')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM read_parquet('{outside}')",
    "SELECT * FROM '{outside}'",
    "SELECT * FROM parquet_metadata('{outside}')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT getenv('HOME')",
    "SELECT * FROM sqlite_scan('{victim}/x.db', 't')",
    "SELECT * FROM read_text('http://127.0.0.1:9/x')",
    "SELECT * FROM query('DELETE FROM spans')",
]


def _filled(db: Path) -> None:
    llmtrace.init(db=db, deploy="v1", service_name="app")
    for i in range(3):
        with rec.start_pass("smol") as p:
            p.set_many({"gen_ai.usage.input_tokens": 128, "gen_ai.usage.cache_read.input_tokens": 96,
                        "llmtrace.ttft_ms": 20.0 + i})
    llmtrace.shutdown()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("sqlro")
    store = root / "store" / "traces.duckdb"
    store.parent.mkdir()
    _filled(store)
    other = root / "other.duckdb"
    duckdb.connect(str(other)).close()
    outside = root / "outside.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 'secret' AS s) TO '{outside}' (FORMAT parquet)")
    con.close()
    victim = root / "victim"
    victim.mkdir()
    yield {"store": store, "other": other, "outside": outside, "victim": victim}


def _fingerprint(w: dict[str, Path]) -> tuple[str, list[str], list[str], list[tuple[object, ...]]]:
    store = w["store"]
    digest = hashlib.sha256(store.read_bytes()).hexdigest()
    con = duckdb.connect(str(store), read_only=True)
    try:
        counts = con.execute("SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM deploys), "
                             "(SELECT count(*) FROM llmtrace_meta), (SELECT count(*) FROM requests)").fetchall()
    finally:
        con.close()
    return (digest, sorted(p.name for p in store.parent.iterdir()),
            sorted(str(p) for p in w["victim"].rglob("*")), counts)


def _fill(q: str, w: dict[str, Path]) -> str:
    return q.format(store=w["store"], cat=w["store"].stem, other=w["other"], victim=w["victim"],
                    outside=w["outside"])


@pytest.mark.parametrize("shape", ESCAPES)
def test_escape_shape_is_refused(shape: str, world: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = _fingerprint(world)
    rc = main(["sql", "--db", str(world["store"]), _fill(shape, world)])
    out, err = capsys.readouterr()
    assert rc == 2, (shape, out, err)
    assert err.startswith("llmtrace sql: refused") and err.count("\n") == 1, err
    assert "Traceback" not in err and "secret" not in out and "root:" not in out
    assert _fingerprint(world) == before


def test_there_are_at_least_fifty_shapes() -> None:
    assert len(ESCAPES) >= 50


def test_reads_still_work_on_the_locked_connection(world: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = _fingerprint(world)
    for q in ("SELECT count(*) AS n FROM requests", "/* why */ WITH x AS (SELECT 1 AS a) SELECT a FROM x; SELECT 2",
              "EXPLAIN SELECT * FROM spans", "DESCRIBE spans", "SUMMARIZE requests", "SHOW TABLES",
              "PIVOT (SELECT deploy, 1 AS n FROM requests) ON deploy IN ('v1', 'v2') USING sum(n)"):
        rc = main(["sql", "--db", str(world["store"]), q])
        out, err = capsys.readouterr()
        assert rc == 0 and err == "", (q, err)
        assert out
    assert _fingerprint(world) == before


def test_parquet_mode_allows_only_the_named_files(world: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    export = tmp_path / "export"
    assert main(["export", "--db", str(world["store"]), "--parquet", str(export)]) == 0
    (export / "neighbour.csv").write_text("a\nsecret\n")
    glob = str(export / "**" / "*.parquet")
    capsys.readouterr()
    assert main(["sql", "--parquet", glob, "--json", "SELECT count(*) AS n FROM requests"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"n": 3}]
    files_before = sorted(str(p) for p in tmp_path.rglob("*"))
    for q in (f"SELECT * FROM read_csv('{export}/neighbour.csv')", f"SELECT * FROM read_parquet('{world['outside']}')",
              f"SELECT * FROM glob('{export}/*')", f"COPY (SELECT 1) TO '{export}/x.csv'",
              "WITH d AS (DELETE FROM deploys RETURNING *) SELECT * FROM d",
              f"SELECT * FROM read_text('{export}/neighbour.csv')"):
        rc = main(["sql", "--parquet", glob, q])
        out, err = capsys.readouterr()
        assert rc == 2 and err.startswith("llmtrace sql: refused") and "secret" not in out, (q, err)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == files_before


def test_the_issue_chain_through_a_subprocess(world: dict[str, Path]) -> None:
    """The exact attacks of the issue, through the installed entry point, as a user would type them."""
    before = _fingerprint(world)
    for shape in ESCAPES[:3] + ESCAPES[8:9]:
        r = subprocess.run([sys.executable, "-m", "llmtrace.cli", "sql", "--db", str(world["store"]),
                            _fill(shape, world)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.startswith("llmtrace sql: refused"), r.stderr
        assert len(r.stderr.splitlines()) == 1 and r.stdout == ""
    assert _fingerprint(world) == before
    assert not (world["victim"] / "x.sh").exists()
