"""The store under concurrency and failure: real processes, real files, nothing raised into the app."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import llmtrace
from llmtrace.tracer import health
from llmtrace.tracer import recording as rec
from llmtrace.tracer.record.exporter import DuckDBSpanExporter
from llmtrace.tracer.storage.store import StoreError, read_connection, write_connection

WRITER = textwrap.dedent("""
    import sys, time
    import llmtrace
    from llmtrace.tracer import recording as rec, health
    db, seconds, tag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    llmtrace.init(db=db, service_name=tag, shutdown_timeout_s=120)  # "lose nothing": wait out the backlog
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with rec.start_pass("m") as p:
            for stage in ("cache.prefix_match", "forward.prefill", "gen.stop"):
                with rec.stage(stage, parent=p):
                    pass
        n += 4
        if n % 400 == 0:
            time.sleep(0.01)
    llmtrace.shutdown()
    dropped = health.counters().get("dropped_spans", 0)
    print(n, dropped)
""")

READER = textwrap.dedent("""
    import sys, time
    from llmtrace.tracer.storage.store import read_connection
    db, seconds = sys.argv[1], float(sys.argv[2])
    seen, reads, errors = [], 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            # the wait every reader gets (llmtrace sql, diagnose): at load ~20 two busy writers kept it out 10 s
            with read_connection(db) as conn:
                seen.append(conn.execute("SELECT count(*) FROM requests").fetchall()[0][0])
                reads += 1
        except Exception as exc:
            errors += 1
            print("reader error:", exc, file=sys.stderr)
        time.sleep(0.2)
    print(reads, errors, seen[0] if seen else -1, max(seen) if seen else -1, int(seen == sorted(seen)))
""")


@pytest.mark.slow
def test_two_writers_and_a_reader_for_30s_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.duckdb"
    with write_connection(db):
        pass  # create the schema so the reader can open from the first moment
    seconds = float(os.environ.get("LLMTRACE_CONCURRENCY_S", "30"))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(seconds), f"w{i}"],
                              stdout=subprocess.PIPE, text=True) for i in range(2)]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(db), str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = [p.communicate(timeout=seconds + 120) for p in procs]
    r_out, r_err = reader.communicate(timeout=seconds + 120)
    assert all(p.returncode == 0 for p in procs), results
    sent = {f"w{i}": int(out.split()[0]) for i, (out, _) in enumerate(results)}
    assert all(int(out.split()[1]) == 0 for out, _ in results), results  # nothing dropped
    with read_connection(db) as conn:
        stored = dict(conn.execute("SELECT service, count(*) FROM spans GROUP BY service").fetchall())
    assert stored == sent
    reads, errors, first, last, monotonic = map(int, r_out.split())
    assert errors == 0, r_err
    assert reads >= 10 and last > first and monotonic == 1  # the reader saw new data arrive


def _hold_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    script = f"import duckdb, time, sys; c = duckdb.connect({str(db)!r}); print('locked', flush=True); time.sleep({seconds})"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _record(n: int) -> None:
    for _ in range(n):
        with rec.start_pass("m") as p, rec.stage("gen.stop", parent=p):
            pass


def test_store_locked_by_another_process_drops_with_counter(tmp_path: Path) -> None:
    db = tmp_path / "locked.duckdb"
    with write_connection(db):
        pass
    holder = _hold_lock(db, 30)
    try:
        exporter = DuckDBSpanExporter(db, lock_timeout_s=0.5)
        llmtrace.init(db="none", exporters=[exporter])
        before = health.counters().get("dropped_spans", 0)
        _record(5)  # the app keeps running
        llmtrace.shutdown()
        assert health.counters()["dropped_spans"] == before + 10
    finally:
        holder.kill()
        holder.wait()


def test_store_locked_briefly_is_waited_for(tmp_path: Path) -> None:
    db = tmp_path / "brief.duckdb"
    with write_connection(db):
        pass
    holder = _hold_lock(db, 1.5)
    llmtrace.init(db=db)
    _record(5)
    llmtrace.shutdown()  # the exporter retries until the other process lets go
    holder.wait()
    with read_connection(db) as conn:
        assert conn.execute("SELECT count(*) FROM spans").fetchall() == [(10,)]


def test_unwritable_location_and_corrupt_file_never_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    corrupt = tmp_path / "corrupt.duckdb"
    corrupt.write_bytes(b"this is not a duckdb file at all" * 100)
    for target in (blocker / "store.duckdb", corrupt):
        llmtrace.init(db=target)
        before = health.counters().get("dropped_spans", 0)
        _record(3)
        llmtrace.shutdown()
        assert health.counters()["dropped_spans"] == before + 6
    with pytest.raises(StoreError, match="not a readable llmtrace store|cannot open store"):
        with read_connection(corrupt):
            pass
    assert corrupt.read_bytes().startswith(b"this is not")  # we never overwrite what we cannot read


def test_size_cap_drops_with_counter(tmp_path: Path) -> None:
    db = tmp_path / "capped.duckdb"
    llmtrace.init(db=db, max_db_bytes=1)
    _record(2)
    llmtrace.force_flush()
    before = health.counters().get("dropped_spans", 0)
    _record(3)
    llmtrace.shutdown()
    assert health.counters()["dropped_spans"] == before + 6
    with read_connection(db) as conn:
        assert conn.execute("SELECT count(*) FROM spans").fetchall() == [(4,)]


def test_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        with read_connection(tmp_path / "nope.duckdb"):
            pass
    assert not (tmp_path / "nope.duckdb").exists()


def test_reader_waits_for_a_writer(tmp_path: Path) -> None:
    db = tmp_path / "rw.duckdb"
    with write_connection(db):
        pass
    holder = _hold_lock(db, 1.0)
    t0 = time.monotonic()
    with read_connection(db, timeout_s=20) as conn:
        assert conn.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
    assert time.monotonic() - t0 >= 0.5
    holder.wait()


def test_reader_and_writer_in_one_process_wait_for_each_other(tmp_path: Path) -> None:
    db = tmp_path / "same.duckdb"
    llmtrace.init(db=db)
    _record(3)
    llmtrace.force_flush()
    with read_connection(db) as conn:
        before = health.counters().get("dropped_spans", 0)
        _record(2)
        import threading

        flusher = threading.Thread(target=llmtrace.force_flush)
        flusher.start()
        time.sleep(0.3)
        assert conn.execute("SELECT count(*) FROM spans").fetchall() == [(6,)]
    flusher.join(timeout=30)
    llmtrace.shutdown()
    assert health.counters().get("dropped_spans", 0) == before
    with read_connection(db) as conn:
        assert conn.execute("SELECT count(*) FROM spans").fetchall() == [(10,)]
