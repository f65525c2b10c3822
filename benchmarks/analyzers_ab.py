"""A/B benchmark of `diagnose` over one store: the analyzers of a git ref (``--base``) against the working
tree's, run in alternating fresh processes so both see the same machine load; wall and CPU seconds (CPU is
the steadier number on a busy shared machine), medians and the ratio, and whether both found the same.

    python benchmarks/analyzers_ab.py --store /tmp/syn100k.duckdb --base HEAD~3 [--rounds 3] [--reps 2]

Only ``analyzers/`` comes from the ref (the tracer, views and store are the working tree's in both), so the
numbers compare analyzer changes alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_s as _cpu_s  # noqa: E402

_ROOT = Path(__file__).resolve().parent.parent


def _child(which: str, analyzers_dir: str, store: str, reps: int) -> None:
    """One timing process: ``reps`` diagnose runs after a warm one; prints JSON."""
    if which == "base":  # the ref's analyzers under the package name the rest of the product imports
        spec = importlib.util.spec_from_file_location(
            "llmtrace.analyzers", f"{analyzers_dir}/__init__.py", submodule_search_locations=[analyzers_dir])
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["llmtrace.analyzers"] = mod
        spec.loader.exec_module(mod)
    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.storage.store import read_connection

    runs = []
    with read_connection(store) as conn:
        findings = run_analyzers(conn)  # warm: the file into the OS cache
        for _ in range(reps):
            t, c = time.perf_counter(), _cpu_s()
            run_analyzers(conn)
            runs.append((time.perf_counter() - t, _cpu_s() - c))
    print(json.dumps({"runs": runs, "findings": [f.to_dict() for f in findings]}))


def _extract(ref: str, into: Path) -> Path:
    archive = into / "analyzers.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", ref, "analyzers"], cwd=_ROOT, check=True, stdout=out)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "analyzers"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="store to diagnose (benchmarks/synthetic_store.py makes one)")
    ap.add_argument("--base", default="HEAD", help="git ref whose analyzers/ is the baseline (or a folder "
                                                   "holding such an analyzers/ copy)")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of processes, order alternating")
    ap.add_argument("--reps", type=int, default=2, help="timed diagnose runs per process")
    ap.add_argument("--child", choices=("base", "new"), help=argparse.SUPPRESS)
    ap.add_argument("--analyzers-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.analyzers_dir or "", args.store, args.reps)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        given = Path(args.base) / "analyzers"
        base_dir = given.resolve() if given.is_dir() else _extract(args.base, Path(tmp))
        runs: dict[str, list[tuple[float, float]]] = {"base": [], "new": []}
        found: dict[str, list[object]] = {}
        loads = []
        for i in range(args.rounds):
            for which in ("base", "new") if i % 2 == 0 else ("new", "base"):
                out = subprocess.run([sys.executable, __file__, "--store", args.store, "--reps", str(args.reps),
                                      "--child", which, "--analyzers-dir", str(base_dir)],
                                     capture_output=True, text=True, cwd=tmp)
                if out.returncode:
                    print(out.stderr[-3000:], file=sys.stderr)
                    return 1
                data = json.loads(out.stdout.strip().splitlines()[-1])
                runs[which] += [tuple(r) for r in data["runs"]]
                found[which] = data["findings"]
                loads.append(os.getloadavg()[0])
    for k, label in ((0, "wall"), (1, "cpu")):
        med = {w: statistics.median(r[k] for r in rs) for w, rs in runs.items()}
        print(f"{label}: base {med['base']:.3f} s, new {med['new']:.3f} s (median of {len(runs['new'])}), "
              f"new/base {med['new'] / med['base']:.3f}")
    print(f"load average (1 min) during the runs: {min(loads):.2f} - {max(loads):.2f}")
    from diagnose_compare import differences

    diff = differences({"findings": found["base"]}, {"findings": found["new"]})
    loose = differences({"findings": found["base"]}, {"findings": found["new"]}, ignore_ids=True)
    print("same findings" if not diff else f"same findings but for the quoted trace ids ({len(diff)} fields)"
          if not loose else "findings differ:\n" + "\n".join(loose))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
