"""Benchmark `explorer`: how fast `llmtrace explore` opens and answers over a 100k-pass store.

    python benchmarks/explorer.py [--passes N] [--store PATH]

`first_screen_s_100k` is the time from creating the app to its first screen drawn with the newest
page of requests (headless Textual at 160×48, imports already done; median of 5); target ≤ 1 s.
`first_screen_cpu_s_100k` is the CPU time that took, which stays put when other work shares the machine
(`load_average_1m` says how busy it was).
`first_screen_process_s_100k` is the same from a cold `python` process (interpreter and imports included).
The other keys time the reads behind each interaction (each a fresh read-only connection, as the app does).
`findings_refresh_*` time the Findings tab's refresh (every analyzer, tui/data/findings_source.py) over the
store as made (passes built from the spans) and over a copy with the writer's pass table (`_kept`), the two
alternated; `cache_view_kept_s_100k` is the Cache tab over that copy. `--findings-only` runs just those and
writes results/explorer_findings.json, leaving explorer.json's full run as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from synthetic_store import bench_store  # noqa: E402

from common import cpu_s, keep_pass_table, save  # noqa: E402

CHILD = """
import asyncio, sys, time
t0 = float(sys.argv[2])
from llmtrace.tui.app import ExplorerApp

async def main():
    app = ExplorerApp(sys.argv[1], analyze_after_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        while not app.requests.rows:
            await pilot.pause(0.005)
        await pilot.pause()
        print(time.time() - t0)

asyncio.run(main())
"""


async def first_screen(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) from creating the app to the first page on screen."""
    from llmtrace.tui.app import ExplorerApp

    t0, c0 = time.perf_counter(), time.process_time()
    app = ExplorerApp(path, analyze_after_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        while not app.requests.rows:
            await pilot.pause(0.005)
        await pilot.pause()  # one more frame: the rows are on screen
        elapsed = time.perf_counter() - t0, time.process_time() - c0
        if app.requests.store_passes == 0:
            raise RuntimeError("the store has no passes")
    return elapsed


def median_time(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def findings_refresh(path: Path, tmp: Path, rounds: int = 3) -> dict[str, object]:
    """The Findings tab's refresh over ``path`` and over a copy with the writer's pass table, alternated
    round by round (a change of load falls on both); medians of wall and CPU seconds."""
    from llmtrace.tui.data.findings_source import read_findings
    from llmtrace.tui.data.store_reader import StoreReader

    kept = tmp / "kept.duckdb"
    shutil.copy(path, kept)
    keep_pass_table(kept)
    seen: dict[str, list[tuple[float, float]]] = {"": [], "_kept": []}
    found: dict[str, int] = {}
    for _ in range(rounds):
        for label, store in (("", path), ("_kept", kept)):
            t, c = time.perf_counter(), cpu_s()
            result = read_findings(StoreReader(store, timeout_s=60))
            seen[label].append((time.perf_counter() - t, cpu_s() - c))
            if result.failures:
                raise RuntimeError(f"analyzers failed in the refresh: {result.failures}")
            found[label] = len(result.findings)
    out: dict[str, object] = {}
    for label, runs in seen.items():
        out[f"findings_refresh{label}_s_100k"] = round(statistics.median(w for w, _ in runs), 3)
        out[f"findings_refresh{label}_cpu_s_100k"] = round(statistics.median(c for _, c in runs), 3)
        out[f"findings_refresh{label}_findings"] = found[label]
    out["cache_view_kept_s_100k"] = round(median_time(StoreReader(kept).cache_report, runs=2), 3)
    return out


def main() -> int:
    def findings_only(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--findings-only", action="store_true",
                        help="only the findings refresh and the kept-table cache view (results/explorer_findings.json)")

    store = bench_store(__doc__.splitlines()[0], name="explorer.duckdb", more_args=findings_only)
    args, path, tmp, made_s = store.args, store.path, store.tmp, store.build_s

    from llmtrace.tui.data.filter_expr import compile_filter
    from llmtrace.tui.data.store_reader import StoreReader

    reader = StoreReader(path)
    stamp = reader.check()
    if args.findings_only:
        save("explorer_findings", {"passes_in_store": stamp.passes, "load_average_1m": round(os.getloadavg()[0], 1),
                                   **findings_refresh(path, Path(tmp.name))})
        tmp.cleanup()
        return 0
    runs = [asyncio.run(first_screen(path)) for _ in range(5)]
    first = statistics.median(w for w, _ in runs)
    first_cpu = statistics.median(c for _, c in runs)
    cold = []
    for _ in range(2):
        t0 = time.time()
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), repr(t0)], capture_output=True, text=True,
                             check=True, cwd=HERE.parent)
        cold.append(float(out.stdout.strip().splitlines()[-1]))
    page = reader.request_page(compile_filter(""), limit=100)
    trace_id = page.rows[0].trace_id
    results = {
        "passes_in_store": stamp.passes,
        "first_screen_s_100k": round(first, 3),
        "first_screen_target_s": 1.0,
        "first_screen_cpu_s_100k": round(first_cpu, 3),  # CPU the app burns for it: steady when the host is busy
        "load_average_1m": round(os.getloadavg()[0], 1),
        "first_screen_process_s_100k": round(min(cold), 3),
        "newest_page_s_100k": round(median_time(lambda: reader.request_page(compile_filter(""), limit=100)), 3),
        "next_page_s_100k": round(median_time(lambda: reader.request_page(compile_filter(""), offset=100,
                                                                           limit=100)), 3),
        "sort_by_ttft_s_100k": round(median_time(lambda: reader.request_page(compile_filter(""), sort="ttft",
                                                                             limit=100)), 3),
        "filter_s_100k": round(median_time(lambda: reader.request_page(compile_filter("ttft>2s finish=length"),
                                                                       limit=100)), 3),
        "open_trace_s_100k": round(median_time(lambda: reader.trace(trace_id)), 3),
        "cache_view_s_100k": round(median_time(reader.cache_report, runs=2), 3),
        "live_poll_s_100k": round(median_time(reader.stamp), 4),
        **findings_refresh(path, Path(tmp.name)),
        "store_build_s": round(made_s, 1),
    }
    save("explorer", results)
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
