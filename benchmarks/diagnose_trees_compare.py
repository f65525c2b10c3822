"""Check `diagnose_trees_compare`: `llmtrace diagnose --json` of two installs of llmtrace over the same stores
(issue 34 item 4: "the same findings").

Each side is a Python environment with its own llmtrace installed (as for benchmarks/wire_rows_compare.py).
Every store given is copied once per side (with its ``.key`` and ``.wal``), so neither side reads what the
other may have written into it (a kept pass table, a stamp), and each side runs
``python -m llmtrace.cli diagnose --db COPY --json`` on its copy. The sides alternate per store.
``--demo`` also has each side write a store of its own with ``llmtrace demo --model tiny --db ...`` (the same
scripted workload; the tiny model's text is random, so the two stores are alike, not equal) and then
diagnoses each demo store with both sides.

    python benchmarks/diagnose_trees_compare.py [--before 8c4a079] [--after HEAD] [--demo] [--tmp DIR] STORE...
    python benchmarks/diagnose_trees_compare.py --side before=/tmp/before-venv/bin/python \\
        --side after=/tmp/after-venv/bin/python --demo STORE.duckdb ...

Without --side, each revision gets an environment of its own (benchmarks/_side_env.py); without a store,
only the demo stores are compared.

Writes benchmarks/results/diagnose_trees_compare.json: per store, whether the findings are equal, and where
they are not, the finding keys (symptom, stage, severity, title) on one side only and the first differing
fields of findings that share a key.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _side_env import commit_of, sides_from  # noqa: E402

from common import save  # noqa: E402


def _copy(store: Path, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(store, to)
    for ext in (".key", ".wal"):
        if Path(str(store) + ext).exists():
            shutil.copy(str(store) + ext, str(to) + ext)
    return to


def diagnose(python: str, db: Path) -> tuple[dict[str, Any], float]:
    t = time.monotonic()
    out = subprocess.run([python, "-W", "ignore", "-m", "llmtrace.cli", "diagnose", "--db", str(db), "--json"],
                         capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=1200)
    if out.returncode:
        return {"error": f"exit {out.returncode}: {out.stderr[-2000:]}"}, time.monotonic() - t
    return json.loads(out.stdout), time.monotonic() - t


def _key(f: dict[str, Any]) -> str:
    return " | ".join(str(f.get(k)) for k in ("symptom", "stage", "severity", "title"))


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only {'after' if k not in a else 'before'}")
            else:
                out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]


def compare(sides: dict[str, str], store: Path, work: Path) -> dict[str, Any]:
    (a, pa), (b, pb) = sides.items()
    got = {}
    seconds = {}
    for side, python in ((a, pa), (b, pb)):
        got[side], seconds[side] = diagnose(python, _copy(store, work / side / store.name))
    fa, fb = got[a].get("findings"), got[b].get("findings")
    row: dict[str, Any] = {"store": str(store), "diagnose_wall_s": {k: round(v, 1) for k, v in seconds.items()}}
    if fa is None or fb is None:
        row.update(equal=False, errors={k: v.get("error") for k, v in got.items() if "error" in v})
        return row
    row["findings"] = {a: len(fa), b: len(fb)}
    row["equal"] = got[a] == got[b]
    row["findings_equal"] = fa == fb
    if not row["equal"]:
        ka, kb = [_key(f) for f in fa], [_key(f) for f in fb]
        row[f"only_{a}"] = [k for k in ka if k not in kb]
        row[f"only_{b}"] = [k for k in kb if k not in ka]
        row["same_order"] = [k for k in ka if k in kb] == [k for k in kb if k in ka]
        shared = {_key(f): f for f in fb}
        row["differing_fields"] = {k: _diff(f, shared[k])[:12] for k, f in ((_key(f), f) for f in fa)
                                   if k in shared and f != shared[k]}
        row["other_top_level_differences"] = _diff({k: v for k, v in got[a].items() if k != "findings"},
                                                   {k: v for k, v in got[b].items() if k != "findings"})[:12]
    row["top"] = {a: [_key(f) for f in fa[:3]], b: [_key(f) for f in fb[:3]]}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", action="append", metavar="NAME=PYTHON",
                    help="a side's name and its environment's python (give two; default: --before and --after)")
    ap.add_argument("--before", default="8c4a079", help="revision of the 'before' side (default: issue 34's start)")
    ap.add_argument("--after", default="HEAD", help="revision of the 'after' side (default HEAD)")
    ap.add_argument("--demo", action="store_true", help="also diagnose a demo store written by each side "
                                                         "(the default when no store is given)")
    ap.add_argument("--tmp", help="keep the environments, the copies and the demo stores here")
    ap.add_argument("stores", nargs="*", type=Path)
    args = ap.parse_args()
    holder = None if args.tmp else tempfile.TemporaryDirectory()
    work = Path(args.tmp or holder.name)  # type: ignore[union-attr]
    sides = sides_from(args.side, args.before, args.after, work)
    args.demo = args.demo or not args.stores
    stores = list(args.stores)
    demo_s = {}
    if args.demo:
        for side, python in sides.items():
            db = work / "demo" / f"demo_by_{side}.duckdb"
            db.parent.mkdir(parents=True, exist_ok=True)
            t = time.monotonic()
            subprocess.run([python, "-W", "ignore", "-m", "llmtrace.cli", "demo", "--model", "tiny", "--db", str(db)],
                           check=True, capture_output=True, cwd=tempfile.gettempdir(), timeout=3000)
            demo_s[side] = round(time.monotonic() - t, 1)
            stores.append(db)
    rows = []
    for store in stores:
        rows.append(compare(sides, store, work / "copies"))
        print(json.dumps({k: rows[-1].get(k) for k in ("store", "equal", "findings")}), flush=True)
    revs = None if args.side else {"before": commit_of(args.before), "after": commit_of(args.after)}
    save("diagnose_trees_compare", {"revisions": revs or "given as --side environments", "sides": sides,
                                    "demo_wall_s": demo_s, "stores": len(rows),
                                    "equal": sum(bool(r.get("equal")) for r in rows), "rows": rows})


if __name__ == "__main__":
    main()
