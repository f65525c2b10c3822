"""Benchmark `collector_ab`: ``llmtrace collect`` of two revisions on the same requests, interleaved, and the
rows each one stores compared.

    python benchmarks/collector_ab.py [--before REV] [--after HEAD] [--rounds 3] [--spans 204800] [--senders 4]
    python benchmarks/collector_ab.py --side before=/path/bin/python --side after=/path/bin/python

For each shape of ``benchmarks/collector.py`` (llmtrace's own 512-span requests; the engines' and routers'
shapes with the apps' client spans collect joins to them), ``--rounds`` rounds of both sides, the order
alternating (before-after, after-before, ...), each a fresh collector on a fresh store fed by the same
senders: the collector process's CPU per span (its user + system time from /proc: the figure the other
processes on a shared machine move least) and spans/s. The first round's two stores of each shape are then
compared table by table, every row and column (the response-id join's bookkeeping tables without their clock
columns, ``at_s`` and ``seq``), and the passes as readers take them (the kept pass table splits them between
kept and waiting by when its last fold ran): what is stored must not depend on the revision. Each side is an environment
with that revision's llmtrace installed (benchmarks/_side_env.py). Writes benchmarks/results/collector_ab.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _collector_shapes import engines_template_request, rows_per_body  # noqa: E402
from _side_env import commit_of, sides_from  # noqa: E402
from collector import BATCH, bench_collector, make_bodies, template_request  # noqa: E402

from common import save  # noqa: E402

CLOCK_COLUMNS = frozenset({"at_s", "seq"})  # when a join key or move was noted: the run's clock, not the spans


def compare_stores(a: Path, b: Path) -> dict[str, object]:
    """Rows of each table that one store has and the other lacks (multiset difference, both ways)."""
    import duckdb

    conn = duckdb.connect()
    try:
        conn.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        conn.execute(f"ATTACH '{b}' AS b (READ_ONLY)")

        def tables(db: str) -> set[str]:
            return {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = ?",
                                               [db]).fetchall()}

        out: dict[str, object] = {}
        common = sorted(tables("a") & tables("b"))
        for only, db in (("only_before", "a"), ("only_after", "b")):
            out[only] = sorted(tables(db) - set(common))
        for t in common:
            cols = [r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' "
                                               "AND table_name = ? ORDER BY column_index", [t]).fetchall()
                    if r[0] not in CLOCK_COLUMNS]
            sel = ", ".join(f'"{c}"' for c in cols)
            n = conn.execute(f"SELECT count(*) FROM a.main.{t}").fetchone()[0]
            missing = conn.execute(f"SELECT count(*) FROM (SELECT {sel} FROM a.main.{t} EXCEPT ALL "
                                   f"SELECT {sel} FROM b.main.{t})").fetchone()[0]
            extra = conn.execute(f"SELECT count(*) FROM (SELECT {sel} FROM b.main.{t} EXCEPT ALL "
                                 f"SELECT {sel} FROM a.main.{t})").fetchone()[0]
            out[t] = {"rows": int(n), "before_not_after": int(missing), "after_not_before": int(extra)}
    finally:
        conn.close()
    out["passes_as_read"] = compare_passes(a, b)
    return out


def compare_passes(a: Path, b: Path) -> dict[str, int]:
    """The passes every reader takes (``store.passes_source``: the kept pass rows, the waiting traces' built
    again), of each store. Which of them a writer has folded into the kept table when it stops depends on
    when its last fold ran (pass_table.FOLD_S), so the two tables may split them differently; this must not."""
    import duckdb

    from llmtrace.tracer.storage.store import passes_source, read_connection

    got = []
    for db in (a, b):
        with read_connection(db) as conn:
            got.append(conn.execute(f"SELECT * FROM {passes_source(conn)}").to_arrow_table())
    conn = duckdb.connect()
    try:
        conn.register("pa", got[0])
        conn.register("pb", got[1])
        return {"rows": got[0].num_rows,
                "before_not_after": int(conn.execute("SELECT count(*) FROM (FROM pa EXCEPT ALL FROM pb)").fetchone()[0]),
                "after_not_before": int(conn.execute("SELECT count(*) FROM (FROM pb EXCEPT ALL FROM pa)").fetchone()[0])}
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="HEAD~1")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--side", action="append", help="NAME=PYTHON (twice), instead of --before/--after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spans", type=int, default=204_800, help="spans a run (a multiple of 512)")
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()) / "llmtrace-collector-ab")
    args = ap.parse_args()
    sides = sides_from(args.side, args.before, args.after, args.tmp)
    names = list(sides)
    res: dict[str, object] = {"sides": {n: (commit_of(r) if not args.side else sides[n]) for n, r in
                                        zip(names, (args.before, args.after))},
                              "spans_a_run": args.spans, "senders": args.senders, "rounds": args.rounds,
                              "load_average_1m_at_start": round(os.getloadavg()[0], 2)}
    work = Path(tempfile.mkdtemp(prefix="llmtrace-collector-ab-"))
    try:
        for shape, template in (("own", template_request), ("engines", engines_template_request)):
            bodies = make_bodies(template(), max(1, args.spans // BATCH), 0)
            rows = rows_per_body(bodies[0])
            runs: dict[str, list[dict[str, object]]] = {n: [] for n in names}
            for i in range(args.rounds):
                for side in (names if i % 2 == 0 else names[::-1]):
                    r = bench_collector(bodies, args.senders, work, name=f"{shape}-{side}-{i}", rows=rows, key="c",
                                        python=sides[side])
                    r["load_average_1m"] = r.pop("c_load_average_1m_at_end")
                    runs[side].append(r)
                    print(shape, side, i, {k: r[k] for k in ("c_cpu_us_per_span", "c_spans_per_s", "c_spans_lost",
                                                           "load_average_1m")}, flush=True)
            for side, rs in runs.items():
                cpu = [float(str(r["c_cpu_us_per_span"])) for r in rs]
                res[f"{shape}_{side}_cpu_us_per_span"] = cpu
                res[f"{shape}_{side}_cpu_us_per_span_median"] = round(statistics.median(cpu), 2)
                res[f"{shape}_{side}_spans_per_s"] = [r["c_spans_per_s"] for r in rs]
                res[f"{shape}_{side}_spans_lost"] = sum(int(str(r["c_spans_lost"])) for r in rs)
                res[f"{shape}_{side}_load_average_1m"] = [r["load_average_1m"] for r in rs]
            res[f"{shape}_cpu_ratio_{names[1]}_over_{names[0]}"] = round(
                float(str(res[f"{shape}_{names[1]}_cpu_us_per_span_median"])) /
                float(str(res[f"{shape}_{names[0]}_cpu_us_per_span_median"])), 3)
            res[f"{shape}_stored_rows_compared"] = compare_stores(work / f"{shape}-{names[0]}-0.duckdb",
                                                                  work / f"{shape}-{names[1]}-0.duckdb")
            for p in work.glob(f"{shape}-*"):
                p.unlink() if p.is_file() else shutil.rmtree(p, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save("collector_ab", res)


if __name__ == "__main__":
    main()
