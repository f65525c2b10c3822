"""Shared by every benchmark: write ``results/<name>.json`` (flat numbers, units in key names), this process's CPU
seconds, and the kept-pass-table case analyzers.py and scale.py both measure."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# BENCH_RESULTS_DIR: write somewhere else (a quick check that must not replace the recorded results)
RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR") or Path(__file__).resolve().parent / "results")
# the 1-minute load average when the benchmark started (this module is imported at the top of each script): every
# result records it and the one at save time, as the machine may be shared
LOAD_AT_START = round(os.getloadavg()[0], 2)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def save(name: str, results: dict[str, object]) -> Path:
    """Write the results of benchmark ``name``; values should be numbers (or strings for notes)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    load_end = round(os.getloadavg()[0], 2)
    results = {"load_average_at_start": LOAD_AT_START, **results}  # a script's own reading wins
    results.setdefault("load_average_at_end", load_end)
    if max(LOAD_AT_START, load_end) > (os.cpu_count() or 1):
        results.setdefault("note", "measured under load: other processes shared the CPUs (see the load averages)")
    out = {**results, "machine": machine(), "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(out, indent=2, sort_keys=False) + "\n")
    print(json.dumps(out, indent=2))
    return path


def cpu_s() -> float:
    """CPU seconds this process has used (user + system, its native threads included): on a shared machine
    the wall time of a step includes waiting for a CPU, the difference of two readings of this does not."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ── ``diagnose`` on a store whose writer keeps the per-pass table (tracer/storage/pass_table.py) against the
# passes built from the spans: the one case benchmarks/analyzers.py (``diagnose_s_100k_kept_passes``) and
# benchmarks/scale.py (``--store-pass-table``) both measure, run the same way for both. The two modes are
# alternated round by round, so a change in the machine's load falls on both alike.
@dataclass(frozen=True, slots=True)
class DiagnoseRun:
    wall_s: float
    cpu_s: float  # this process's CPU seconds (DuckDB's threads included)
    findings: list  # what run_analyzers returned (analyzers' Finding objects)


def keep_pass_table(path: Path) -> float:
    """Build the writer's pass table in the store at ``path`` (what its first batch does on a store without
    one: make_store writes spans alone), in one transaction; seconds it took."""
    from llmtrace.tracer.storage import pass_table
    from llmtrace.tracer.storage.store import write_connection

    with write_connection(path) as conn:
        t = time.perf_counter()
        conn.execute("BEGIN")
        pass_table.rebuild(conn)
        conn.execute("COMMIT")
        return time.perf_counter() - t


def timed_run(run: Callable[[], list]) -> DiagnoseRun:
    """One timed ``run()`` (every analyzer, as ``diagnose`` runs them): wall and CPU seconds, what it found.
    Also the timing of benchmarks/diagnose_vs_ref.py's processes, which load this file on its own."""
    t, c = time.perf_counter(), cpu_s()
    findings = run()
    return DiagnoseRun(time.perf_counter() - t, cpu_s() - c, findings)


def diagnose_spans_and_kept(spans_db: Path, kept_db: Path, rounds: int, warm: bool = False,
                            one_thread: bool = False) -> dict[str, list[DiagnoseRun]]:
    """``rounds`` timed runs of every analyzer (what ``llmtrace diagnose`` runs) per mode, alternated (with
    ``warm``, each after an untimed run on the same connection): "spans" reads
    ``spans_db`` with the passes built from the spans (the kept table, if any, left unbound), "kept" reads
    ``kept_db`` as ``diagnose`` opens it, which binds the kept table (checked: it must be bound). With
    ``one_thread``, "spans_one_thread" is "spans" with the analyzers run one by one (analyzers/core/concurrent_run.py
    runs several at once by default)."""
    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.storage.store import pass_table as bound
    from llmtrace.tracer.storage.store import read_connection, read_store

    modes = ("spans", "kept", *(("spans_one_thread",) if one_thread else ()))
    runs: dict[str, list[DiagnoseRun]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode in modes:
            kept = mode == "kept"
            threads = 1 if mode == "spans_one_thread" else None
            with (read_store(kept_db) if kept else read_connection(spans_db)) as conn:
                if (bound(conn) is not None) != kept:
                    raise RuntimeError(f"{mode}: the kept pass table is {'not ' if kept else ''}bound")
                if warm:  # the timed run then finds the connection's caches filled, as d50ff3b's baseline did
                    run_analyzers(conn, threads=threads)
                runs[mode].append(timed_run(lambda: run_analyzers(conn, threads=threads)))  # noqa: B023 (run at once)
    return runs
