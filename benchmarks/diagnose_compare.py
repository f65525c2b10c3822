"""Compare `llmtrace diagnose --json` over a store with a reference run: the check an analyzer optimisation
must pass (same findings: stages, severities, titles, summaries, evidence, quoted trace ids).

    python benchmarks/diagnose_compare.py --db /tmp/syn100k.duckdb --save /tmp/ref.json   # before a change
    python benchmarks/diagnose_compare.py --db /tmp/syn100k.duckdb --against /tmp/ref.json
    python benchmarks/diagnose_compare.py --files A.json B.json [--ignore-ids]

Exit status 0 when equal, 1 with a list of the differing findings and fields otherwise. ``--ignore-ids``
leaves the quoted trace ids out (a reference taken while some analyzer quoted ids in no fixed order).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent


def run_diagnose(db: str, extra: list[str]) -> dict[str, Any]:
    """The JSON `llmtrace diagnose` prints, run as a user runs it (a fresh process, the public CLI)."""
    cmd = [sys.executable, "-m", "llmtrace.cli", "diagnose", "--db", db, "--json", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=_ROOT)
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def _strip_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_ids(v) for k, v in value.items() if k != "trace_ids"}
    if isinstance(value, list):
        return [_strip_ids(v) for v in value]
    return value


def differences(ref: dict[str, Any], new: dict[str, Any], ignore_ids: bool = False) -> list[str]:
    """Human-readable lines, one per differing finding field; empty when the runs agree."""
    if ignore_ids:
        ref, new = _strip_ids(ref), _strip_ids(new)
    out: list[str] = []
    if ref.get("symptoms") != new.get("symptoms"):
        out.append(f"symptoms: {ref.get('symptoms')} != {new.get('symptoms')}")
    a, b = ref.get("findings", []), new.get("findings", [])
    if len(a) != len(b):
        out.append(f"{len(a)} findings != {len(b)}: " + ", ".join(f.get("symptom", "?") for f in b))
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                out.append(f"finding {i} ({x.get('symptom')}) {key}:\n  ref {json.dumps(x.get(key))[:400]}"
                           f"\n  new {json.dumps(y.get(key))[:400]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="store to diagnose")
    ap.add_argument("--save", metavar="FILE", help="write this run as the reference")
    ap.add_argument("--against", metavar="FILE", help="compare this run with a reference")
    ap.add_argument("--files", nargs=2, metavar=("REF", "NEW"), help="compare two saved runs")
    ap.add_argument("--ignore-ids", action="store_true", help="leave quoted trace ids out of the comparison")
    ap.add_argument("diagnose_args", nargs="*", help="more diagnose arguments, after --")
    args = ap.parse_args()
    if args.files:
        ref, new = (json.loads(Path(p).read_text()) for p in args.files)
    else:
        if not args.db:
            ap.error("--db is needed unless --files is given")
        new = run_diagnose(args.db, args.diagnose_args)
        if args.save:
            Path(args.save).write_text(json.dumps(new, indent=2, ensure_ascii=False) + "\n")
            print(f"saved {len(new['findings'])} findings to {args.save}")
        if not args.against:
            return 0
        ref = json.loads(Path(args.against).read_text())
    diff = differences(ref, new, args.ignore_ids)
    for line in diff:
        print(line)
    print("same findings" if not diff else f"{len(diff)} differences")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
