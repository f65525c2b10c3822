"""Shared by every benchmark: write ``results/<name>.json`` (flat numbers, units in key names)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
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
