"""Shared by every benchmark: write ``results/<name>.json`` (flat numbers, units in key names)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


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
    out = {**results, "machine": machine(), "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(out, indent=2, sort_keys=False) + "\n")
    print(json.dumps(out, indent=2))
    return path
