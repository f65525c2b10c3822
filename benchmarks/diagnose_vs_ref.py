"""Benchmark `diagnose_vs_ref`: `diagnose` over 100k passes at a git ref against the working tree, side by
side in one run. Each side is its own whole tree (tracer, views, analyzers: a ref's layout may differ from
today's) over the synthetic store its own benchmarks/synthetic_store.py writes, timed in fresh processes
that alternate, so a change in the machine's load falls on both alike. This is the check of "no benchmark
regresses by more than 5%" for the `analyzers` benchmark's diagnose_s_100k (spans only: the passes are built
from the pass spans' JSON, as on a store the ref's writer made).

    python benchmarks/diagnose_vs_ref.py [--ref d50ff3b] [--rounds 5] [--passes 100000] [--tmp DIR]
    python benchmarks/diagnose_vs_ref.py --instructions [--ref d50ff3b] [--now-ref REV] [--tmp DIR]

On a shared two-core machine the CPU seconds of one side vary between rounds by more than the 5% the check
allows. ``--instructions`` counts instead, under valgrind's callgrind (deterministic, whatever the load):
each side's process opens its store, sets DuckDB to one thread and runs every analyzer once, then twice;
the difference is the instructions of one warm run (the opening, imports and first-run planning cancel).
It writes benchmarks/results/diagnose_vs_ref_instructions.json (about 15 minutes: the four processes run
two at a time, ~50x slower under callgrind).

Each process opens its store, runs every analyzer once to warm the connection, then times three runs and
keeps the fastest (how `analyzers.py` measures). Reports medians over rounds of wall and CPU seconds and the
ratios working tree / ref; writes benchmarks/results/diagnose_vs_ref.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

_ROOT = Path(__file__).resolve().parent.parent
# the top-level folders setup.py maps onto llmtrace's sub-packages (a ref may lack some: skipped)
_FOLDERS = ("tracer", "adapters", "backend", "analyzers", "tui", "report")

# One timing process. argv: store, package root (or "" for the installed working tree), this benchmarks/
# common.py (loaded from its file: its timing, nothing of llmtrace's at import, so it serves either tree).
_CHILD = r"""
import importlib.util, json, sys
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
import llmtrace.analyzers as A
try:
    from llmtrace.tracer.storage.store import read_store as opener
except ImportError:  # a ref from before tracer/ was split into sub-packages
    from llmtrace.tracer.store import read_connection as opener
spec = importlib.util.spec_from_file_location("bench_common", sys.argv[3])
common = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = common  # its dataclasses look their module up
spec.loader.exec_module(common)
with opener(sys.argv[1]) as conn:
    A.run_analyzers(conn)
    runs = [common.timed_run(lambda: A.run_analyzers(conn)) for _ in range(3)]
print("RESULT " + json.dumps({"wall": min(r.wall_s for r in runs), "cpu": min(r.cpu_s for r in runs),
                              "findings": len(runs[-1].findings), "from": A.__file__}))
"""

# Builds a store with a tree's own synthetic_store.py. argv: package root, benchmarks dir, path, passes.
_BUILD = r"""
import sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
import llmtrace.tracer  # the tree's own, before synthetic_store imports anything of it
sys.path.insert(0, sys.argv[2])
from synthetic_store import make_store
make_store(sys.argv[3], passes=int(sys.argv[4]), seed=0)
"""


def ref_tree(ref: str, tmp: Path) -> Path:
    """``ref``'s files under tmp/tree, and tmp/pkg: a package root whose ``llmtrace`` links them as setup.py
    maps them (so the ref imports as ``llmtrace`` ahead of the installed working tree)."""
    tree, pkg = tmp / "tree", tmp / "pkg" / "llmtrace"
    archive = tmp / "ref.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref], cwd=_ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    pkg.mkdir(parents=True)
    for f in (tree / "llmtrace").glob("*.py"):
        (pkg / f.name).symlink_to(f)
    for folder in _FOLDERS:
        if (tree / folder).is_dir():
            (pkg / folder).symlink_to(tree / folder, target_is_directory=True)
    return tree


# One counted process. argv: store, package root (or "" for the installed working tree), runs (1 or 2).
_COUNTED = r"""
import sys
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
import llmtrace.analyzers as A
try:
    from llmtrace.tracer.storage.store import read_store as opener
except ImportError:
    from llmtrace.tracer.store import read_connection as opener
with opener(sys.argv[1]) as conn:
    conn.execute("SET threads = 1")  # DuckDB's worker threads would make the count depend on scheduling
    for _ in range(int(sys.argv[3])):
        found = A.run_analyzers(conn)
print("RESULT", len(found), A.__file__)
"""


def count_instructions(sides: dict[str, tuple[str, Path, Path]]) -> dict[str, object]:
    """Instructions of one warm run of every analyzer per side (callgrind; see the module's docstring)."""
    import re

    jobs = {(side, runs): subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-W", "ignore", "-c",
         _COUNTED, str(store), root, str(runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tempfile.gettempdir()) for side, (root, _b, store) in sides.items() for runs in (1, 2)}
    counts: dict[tuple[str, int], int] = {}
    for key, proc in jobs.items():  # (all four at once: each is single-threaded under valgrind)
        out, err = proc.communicate()
        m = re.search(r"Collected\s*:\s*([\d,]+)", err)
        if proc.returncode or m is None or "RESULT" not in out:
            raise SystemExit(f"a counted process failed ({key}):\n{err[-3000:]}")
        counts[key] = int(m.group(1).replace(",", ""))
    warm = {side: counts[(side, 2)] - counts[(side, 1)] for side in sides}
    return {**{f"{side}_warm_run_instructions": n for side, n in warm.items()},
            **{f"{side}_one_run_process_instructions": counts[(side, 1)] for side in sides},
            "ratio_instructions": round(warm["now"] / warm["ref"], 4), "duckdb_threads": 1}


def _run(code: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code, *args], capture_output=True, text=True,
                         cwd=tempfile.gettempdir())
    if out.returncode:
        raise SystemExit(f"a timing process failed:\n{out.stderr[-3000:]}")
    return out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="d50ff3b", help="the git ref to compare with (default: #15's baseline)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=100_000)
    ap.add_argument("--tmp", help="keep the ref's tree and both stores here (reused when present)")
    ap.add_argument("--now-ref", help="measure this commit's tree as 'now' instead of the installed working tree "
                                      "(so edits in progress in the tree do not enter the measurement)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions under callgrind instead of timing (deterministic under load)")
    args = ap.parse_args()

    holder = None if args.tmp else tempfile.TemporaryDirectory()
    tmp = Path(args.tmp or holder.name)  # type: ignore[union-attr]
    tmp.mkdir(parents=True, exist_ok=True)
    if not (tmp / "pkg").exists():
        ref_tree(args.ref, tmp)
    now_root = ""
    if args.now_ref:
        # named by the commit, not the name given: a branch or HEAD moves, and the tree kept for it would not
        commit = subprocess.run(["git", "rev-parse", "--short=12", f"{args.now_ref}^{{commit}}"], cwd=_ROOT,
                                check=True, capture_output=True, text=True).stdout.strip()
        now_tmp = tmp / f"now-{commit}"
        if not (now_tmp / "pkg").exists():
            now_tmp.mkdir(parents=True, exist_ok=True)
            ref_tree(args.now_ref, now_tmp)
        now_root = str(now_tmp / "pkg")
    sides = {"ref": (str(tmp / "pkg"), tmp / "tree" / "benchmarks", tmp / f"ref_{args.passes}.duckdb"),
             "now": (now_root, _ROOT / "benchmarks", tmp / f"now_{args.passes}.duckdb")}
    for root, bench, store in sides.values():
        if not store.exists():
            _run(_BUILD, root, str(bench), str(store), str(args.passes))
    if args.instructions:
        save("diagnose_vs_ref_instructions", {"ref": args.ref, "now": args.now_ref or "working tree",
                                               "passes": args.passes, **count_instructions(sides)})
        return
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    loads: list[float] = []
    for _ in range(args.rounds):
        for side, (root, _bench, store) in sides.items():
            out = _run(_CHILD, str(store), root, str(_ROOT / "benchmarks" / "common.py"))
            line = next(x for x in out.splitlines() if x.startswith("RESULT "))
            got = json.loads(line[len("RESULT "):])
            if (side == "ref") != (str(tmp / "pkg") in got["from"]):
                raise SystemExit(f"{side}: imported the wrong tree ({got['from']})")
            runs[side].append(got)
            loads.append(os.getloadavg()[0])
    results: dict[str, object] = {"ref": args.ref, "passes": args.passes, "rounds": args.rounds}
    for side, got in runs.items():
        for key in ("wall", "cpu"):
            results[f"{side}_{key}_s_median"] = round(statistics.median(r[key] for r in got), 3)
            results[f"{side}_{key}_s_min"] = round(min(r[key] for r in got), 3)
        results[f"{side}_findings"] = got[-1]["findings"]
    for key in ("wall", "cpu"):
        results[f"ratio_{key}_median"] = round(float(results[f"now_{key}_s_median"])  # type: ignore[arg-type]
                                               / float(results[f"ref_{key}_s_median"]), 3)  # type: ignore[arg-type]
    results["load_average_1m"] = [round(min(loads), 2), round(max(loads), 2)]
    save("diagnose_vs_ref", results)


if __name__ == "__main__":
    main()
