"""Every command that reads a store, on every kind of bad store path: one line on stderr naming the path and
what is wrong with it, a non-zero exit, never a traceback, and nothing written (tracer.storage.store's
read_connection is the one door they all go through).

Real processes throughout: each command runs as ``python -m llmtrace.cli``, and the locked store is held by
a second process with an open read-write DuckDB connection, as an app's exporter or a script would.
"""

from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from llmtrace.tracer.storage.store import write_connection


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    argv: tuple[str, ...]  # "{db}" is the store path, "{out}" a fresh output path


COMMANDS = (
    Command("diagnose", ("diagnose", "--db", "{db}")),
    Command("check", ("check", "--baseline-deploy", "v1", "--db", "{db}")),
    Command("report", ("report", "-o", "{out}", "--db", "{db}")),
    Command("sql", ("sql", "SELECT 1", "--db", "{db}")),
    Command("explore", ("explore", "{db}")),
    Command("export", ("export", "--parquet", "{out}", "--db", "{db}")),
    Command("deploy mark", ("deploy", "mark", "v9", "--db", "{db}")),
)

# kind -> what the line must say about it
REASONS = {
    "missing": "no store at",
    "directory": "is a directory",
    "empty": "is an empty file",
    "not_duckdb": "not a readable llmtrace store",
    "foreign_duckdb": "is a DuckDB file but not an llmtrace store",
    "locked": "is locked by another process",
}


def _bad_path(root: Path, kind: str) -> Path:
    path = root / f"{kind}.duckdb"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.touch()
    elif kind == "not_duckdb":
        path.write_text("id,name\n1,not a database\n")
    elif kind == "foreign_duckdb":
        conn = duckdb.connect(str(path))
        conn.execute("CREATE TABLE orders (id INTEGER, total DOUBLE)")
        conn.close()
    elif kind == "locked":
        with write_connection(path):
            pass  # a real store, with every table
    return path


def _run_all(root: Path, db: Path) -> list[tuple[Command, subprocess.CompletedProcess[str]]]:
    def one(i_cmd: tuple[int, Command]) -> tuple[Command, subprocess.CompletedProcess[str]]:
        i, cmd = i_cmd
        argv = [a.format(db=db, out=root / f"out{i}") for a in cmd.argv]
        return cmd, subprocess.run([sys.executable, "-m", "llmtrace.cli", *argv], capture_output=True, text=True,
                                   timeout=120, cwd=root, stdin=subprocess.DEVNULL)

    # several at a time: the locked case waits out the readers' 30 s retry in each command
    with cf.ThreadPoolExecutor(len(COMMANDS)) as pool:
        return list(pool.map(one, enumerate(COMMANDS)))


def _assert_one_line(kind: str, db: Path, runs: list[tuple[Command, subprocess.CompletedProcess[str]]]) -> None:
    for cmd, r in runs:
        where = f"{cmd.name} on {kind}: rc={r.returncode} stdout={r.stdout!r} stderr={r.stderr!r}"
        assert r.returncode != 0, where
        assert "Traceback" not in r.stderr, where
        line = r.stderr.rstrip("\n")
        assert line and "\n" not in line, where
        assert line.startswith("llmtrace "), where
        assert REASONS[kind] in line and db.name in line, where
        assert r.stdout == "", where


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Path]:
    """A store another process keeps open read-write (DuckDB then refuses every other process, read-only too)."""
    db = _bad_path(tmp_path, "locked")
    code = ("import duckdb, sys\n"
            f"conn = duckdb.connect({str(db)!r})\n"
            "conn.execute('SELECT count(*) FROM spans').fetchall()\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield db
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "not_duckdb", "foreign_duckdb"])
def test_bad_store_path_is_one_line(tmp_path: Path, kind: str) -> None:
    db = _bad_path(tmp_path, kind)
    before = sorted(p.name for p in tmp_path.iterdir())
    _assert_one_line(kind, db, _run_all(tmp_path, db))
    # nothing was written: no store made at a missing path (deploy mark), no export or report folder left
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if kind == "foreign_duckdb":  # and no llmtrace table written into someone else's database
        conn = duckdb.connect(str(db), read_only=True)
        assert [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()] == ["orders"]
        conn.close()


def test_locked_store_is_one_line_naming_the_holder(tmp_path: Path, holder: Path) -> None:
    runs = _run_all(tmp_path, holder)
    _assert_one_line("locked", holder, runs)
    assert all("PID " in r.stderr for _, r in runs), runs


def test_export_overwrite_keeps_the_last_export_when_the_store_is_bad(tmp_path: Path) -> None:
    out = tmp_path / "export"
    (out / "date=2026-01-01").mkdir(parents=True)
    kept = out / "date=2026-01-01" / "spans_1.parquet"
    kept.write_bytes(b"PAR1")
    db = _bad_path(tmp_path, "foreign_duckdb")
    r = subprocess.run([sys.executable, "-m", "llmtrace.cli", "export", "--parquet", str(out), "--overwrite",
                        "--db", str(db)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0 and "not an llmtrace store" in r.stderr
    assert kept.read_bytes() == b"PAR1"


@pytest.mark.parametrize("kind", ["directory", "empty", "not_duckdb", "foreign_duckdb"])
def test_collect_refuses_a_file_that_is_not_a_store(tmp_path: Path, kind: str) -> None:
    """collect makes the store when there is none, but never writes its tables into a file that is something
    else (it did, into a foreign DuckDB file)."""
    db = _bad_path(tmp_path, kind)
    r = subprocess.run([sys.executable, "-m", "llmtrace.cli", "collect", "--port", "0", "--db", str(db)],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
    _assert_one_line(kind, db, [(Command("collect", ()), r)])
    if kind == "foreign_duckdb":
        conn = duckdb.connect(str(db), read_only=True)
        assert [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()] == ["orders"]
        conn.close()
