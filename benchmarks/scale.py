"""Fleet scale: every analyzer on ClickHouse (chdb, in-process) against DuckDB on the same spans, and
``diagnose --parquet`` over a big export. Writes benchmarks/results/scale.json.

    python benchmarks/scale.py                         # ClickHouse vs DuckDB, 10k passes (400k spans)
    python benchmarks/scale.py --passes 2000 --parquet-passes 1000000
    python benchmarks/scale.py --passes 0 --store-pass-table 100000   # a store with the writer's pass table

ClickHouse part: a synthetic store (benchmarks/synthetic_store.py, planted causes) is exported to Parquet,
inserted into the OpenTelemetry Collector exporter's ``otel_traces`` table the way the exporter writes OTLP
spans (tracer/storage/clickhouse.py), and all 15 analyzers run on both engines. The findings must match on
symptom, stage, title, summary, every evidence value and the number of traces quoted (which traces an
unordered query quotes first is engine-dependent). Parquet part: ``llmtrace export --parquet`` of a store
with ``--parquet-passes`` passes and the analyzers over the hive glob through ``parquet_connection``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_store import make_store  # noqa: E402

from common import cpu_s, diagnose_spans_and_kept, keep_pass_table  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"


def comparable(findings: list) -> list[tuple]:
    return sorted((f.symptom, f.stage, f.title, f.summary, len(f.trace_ids),
                   tuple((e.label, str(e.value), e.unit, str(e.baseline)) for e in f.evidence)) for f in findings)


def clickhouse_vs_duckdb(passes: int, tmp: Path) -> dict[str, object]:
    import chdb

    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.storage.clickhouse import connect, ensure_views, insert_from_parquet_sql
    from llmtrace.tracer.storage.store import read_connection

    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {"clickhouse_passes": passes, "clickhouse_spans": passes * 40,
                              "chdb_version": getattr(chdb, "__version__", "?")}
    t = time.perf_counter()
    db = make_store(tmp / "syn.duckdb", passes=passes, seed=1)
    out["make_store_s"] = round(time.perf_counter() - t, 2)
    pq = tmp / "spans.parquet"
    with read_connection(db) as conn:
        conn.execute(f"COPY (SELECT * FROM spans) TO '{pq}' (FORMAT parquet)")
        t = time.perf_counter()
        duck = run_analyzers(conn)
        out["duckdb_diagnose_s"] = round(time.perf_counter() - t, 2)
    with connect(f"chdb://{tmp / 'ch'}") as ch:
        ensure_views(ch, create_table=True)
        t = time.perf_counter()
        ch.raw(insert_from_parquet_sql(str(pq)))  # the exporter's rows; the materialized view fills llmtrace_spans
        out["clickhouse_insert_s"] = round(time.perf_counter() - t, 2)
        out["clickhouse_pass_spans_table_rows"] = ch.execute("SELECT count(*) FROM llmtrace_requests").fetchall()[0][0]
        # side by side in one run: the passes read off the materialized per-pass-span table (what diagnose
        # does), then built from the spans' JSON as before it existed
        t = time.perf_counter()
        found = run_analyzers(ch)
        out["clickhouse_diagnose_s"] = round(time.perf_counter() - t, 2)
        out["clickhouse_statements"] = ch.statements
        kept, ch.pass_table = ch.pass_table, None
        t = time.perf_counter()
        from_spans = run_analyzers(ch)
        out["clickhouse_diagnose_from_spans_s"] = round(time.perf_counter() - t, 2)
        ch.pass_table = kept
        out["clickhouse_pass_table_findings_match_spans"] = comparable(from_spans) == comparable(found)
    a, b = comparable(duck), comparable(found)
    out["findings"] = len(duck)
    out["clickhouse_findings"] = len(found)
    out["clickhouse_findings_match_duckdb"] = a == b
    out["clickhouse_trace_ids_identical"] = sum(
        x.trace_ids == y.trace_ids for x, y in zip(sorted(duck, key=lambda f: (f.symptom, f.stage)),
                                                   sorted(found, key=lambda f: (f.symptom, f.stage)), strict=False))
    out["mismatches"] = [{"duckdb": repr(x)[:400], "clickhouse": repr(y)[:400]} for x, y in zip(a, b, strict=False)
                         if x != y]
    return out


def store_pass_table(passes: int, tmp: Path, rounds: int = 2) -> dict[str, object]:
    """diagnose on a DuckDB store reading the writer's per-pass table (tracer/storage/pass_table.py) against
    the same store with the passes built from the spans, alternated in one run (benchmarks/common.py,
    shared with analyzers.py's ``diagnose_s_100k_kept_passes``); the findings must be identical."""
    tmp.mkdir(parents=True, exist_ok=True)
    db = make_store(tmp / "kept.duckdb", passes=passes, seed=0)
    out: dict[str, object] = {"store_pass_table_passes": passes}
    # what the writer's first batch does on a store without the table; "spans" then reads the same file unbound
    out["store_pass_table_rebuild_s"] = round(keep_pass_table(db), 2)
    runs = diagnose_spans_and_kept(db, db, rounds)
    for mode, done in runs.items():
        out[f"store_diagnose_{mode}_s"] = [round(r.wall_s, 2) for r in done]
        out[f"store_diagnose_{mode}_cpu_s"] = [round(r.cpu_s, 2) for r in done]
    found = {mode: [(f.symptom, f.stage, f.title, f.summary, f.trace_ids) for f in done[-1].findings]
             for mode, done in runs.items()}
    out["store_pass_table_findings_identical"] = found["spans"] == found["kept"]
    out["store_pass_table_load_average"] = [round(x, 1) for x in os.getloadavg()]
    return out


def parquet_diagnose(passes: int, tmp: Path, *, compare_store: bool = False) -> dict[str, object]:
    """``llmtrace export --parquet`` of a synthetic store (spans, DIR.passes, DIR.stages), then all analyzers
    through ``parquet_connection`` as ``diagnose --parquet`` runs them. An export already in ``tmp`` (same
    pass count) is reused, so the 1M run can be measured again without 15 minutes of building."""
    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.cli.export import export_parquet, export_passes, export_stages, stages_dir
    from llmtrace.tracer.storage.store import read_connection

    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {"diagnose_parquet_passes": passes, "diagnose_parquet_spans": passes * 40}
    export = tmp / "export"
    done = tmp / f"built-{passes}"
    db = tmp / "big.duckdb"
    if not done.exists():
        t = time.perf_counter()
        make_store(db, passes=passes, seed=0)
        out["parquet_make_store_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        export_parquet(db, export, overwrite=True)
        out["parquet_export_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        export_passes(db, export, overwrite=True)
        export_stages(db, export, overwrite=True)
        out["parquet_export_datasets_s"] = round(time.perf_counter() - t, 1)
        done.write_text("ok\n")
    out["parquet_gb"] = _gb(export)
    out["parquet_datasets_gb"] = round(_gb(Path(f"{export}.passes")) + _gb(stages_dir(export)), 3)
    found, wall, cpu = _diagnose(str(export / "**" / "*.parquet"))
    key = "diagnose_parquet_s_1m" if passes == 1_000_000 else f"diagnose_parquet_s_{passes}"
    out[key] = wall
    out[key.replace("_s_", "_cpu_s_")] = cpu
    out["diagnose_parquet_findings"] = len(found)
    if compare_store and db.exists():
        with read_connection(db) as conn:
            t = time.perf_counter()
            on_store = run_analyzers(conn)
            out[f"diagnose_store_s_{passes}"] = round(time.perf_counter() - t, 1)
        out["diagnose_parquet_findings_match_store"] = comparable(on_store) == comparable(found)
        out["diagnose_parquet_findings_identical_to_store"] = ([f.to_dict() for f in on_store]
                                                              == [f.to_dict() for f in found])
    return out


def _gb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*.parquet")) / 1e9, 3) if path.exists() else 0.0


def _diagnose(glob: str) -> tuple[list, float, float]:
    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.storage.store import parquet_connection

    t, c = time.perf_counter(), cpu_s()
    conn = parquet_connection(glob)
    try:
        found = run_analyzers(conn)
    finally:
        conn.close()
    return found, round(time.perf_counter() - t, 1), round(cpu_s() - c, 1)


# replica k of an id: its first hex digit moved k places round 0-f (translate: a character map, cheap over 400M
# rows), the rest as it was: same length and alphabet, never the original id or another replica's (k < 16),
# and a span's parent id moves with it
_HEX = "0123456789abcdef"


def _fresh(col: str) -> str:
    arms = " ".join(f"WHEN {k} THEN '{_HEX[k:] + _HEX[:k]}'" for k in range(1, 16))
    return f"translate(substr({col}, 1, 1), '{_HEX}', CASE k {arms} END) || substr({col}, 2)"


def replicate_datasets(src: Path, dst: Path, factor: int) -> dict[str, object]:
    """A ``factor``-times-larger per-pass export from ``src`` (an export with DIR.passes and DIR.stages):
    replica 0 is the original, replicas 1.. are its pass and stage rows again with fresh trace and span ids
    (DuckDB COPY). The spans are the original's only (hard links): 400M spans cannot be made here."""
    import duckdb

    from llmtrace.tracer.cli.export import passes_dir, stages_dir

    if not 1 < factor <= 16:
        raise SystemExit("--replicate takes 2..16 (a replica moves an id's first hex digit)")
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    t = time.perf_counter()
    shutil.copytree(src, dst / "export", copy_function=os.link)  # the original 1M passes' spans only
    conn = duckdb.connect()
    ids = {"trace_id", "span_id", "parent_span_id", "client_span_id", "server_span_id"}
    for d_src, d_dst, prefix in ((passes_dir(src), passes_dir(dst / "export"), "passes"),
                                 (stages_dir(src), stages_dir(dst / "export"), "stages")):
        shutil.copytree(d_src, d_dst, copy_function=os.link)  # replica 0
        for part in sorted({f.parent for f in d_src.rglob("*.parquet")}):
            rel = part.relative_to(d_src)
            files = sorted(str(f) for f in part.glob("*.parquet"))
            cols = [r[0] for r in conn.execute(f"DESCRIBE SELECT * FROM read_parquet({files!r})").fetchall()]
            sel = ", ".join(f"{_fresh(c)} AS {c}" if c in ids else f'"{c}"' for c in cols)
            conn.execute(f"COPY (SELECT {sel} FROM read_parquet({files!r}), range(1, {factor}) r(k)) "
                         f"TO '{d_dst / rel / (prefix + '_replicas.parquet')}' (FORMAT parquet, COMPRESSION zstd)")
    conn.close()
    return {"replicate_s": round(time.perf_counter() - t, 1)}


def parquet_diagnose_replicated(tmp: Path, factor: int) -> dict[str, object]:
    src = tmp / "pq" / "export"
    n = 1_000_000 * factor if (tmp / "pq" / "built-1000000").exists() else None
    if n is None:
        raise SystemExit("--replicate needs the 1M export first: --parquet-passes 1000000 --tmp DIR")
    dst = tmp / f"pq{factor}x"
    out = {"diagnose_parquet_10m_passes": n}
    if not (dst / "built").exists():
        out.update(replicate_datasets(src, dst, factor))
        (dst / "built").write_text("ok\n")
    found, wall, cpu = _diagnose(str(dst / "export" / "**" / "*.parquet"))
    key = "diagnose_parquet_s_10m" if n == 10_000_000 else f"diagnose_parquet_s_{n}"
    out[key] = wall
    out[key.replace("_s_", "_cpu_s_")] = cpu
    out["diagnose_parquet_10m_findings"] = len(found)
    out["parquet_10m_datasets_gb"] = round(_gb(dst / "export.passes") + _gb(dst / "export.stages"), 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=10_000, help="passes for the ClickHouse vs DuckDB run (0: skip)")
    ap.add_argument("--parquet-passes", type=int, default=0, help="passes for diagnose --parquet (1000000: the 1M)")
    ap.add_argument("--compare-store", action="store_true", help="also diagnose the store the export came from")
    ap.add_argument("--replicate", type=int, default=0,
                    help="then diagnose a per-pass export this many times the 1M (10: the 10M; needs --tmp)")
    ap.add_argument("--store-pass-table", type=int, default=0,
                    help="passes for diagnose on a store with and without the writer's per-pass table (0: skip)")
    ap.add_argument("--note", default=None, help="replace the notes recorded with the results")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tmp", default=None, help="scratch directory (default: a new temporary one)")
    args = ap.parse_args()
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="llmtrace-scale-"))
    tmp.mkdir(parents=True, exist_ok=True)
    result: dict[str, object] = {}
    out_path = Path(args.out)
    if out_path.exists():
        result = json.loads(out_path.read_text())  # a part not run this time keeps its last measurement
    result["load_average_at_start"] = [round(x, 1) for x in os.getloadavg()]
    result["cpus"] = os.cpu_count()
    try:
        if args.passes:
            result.update(clickhouse_vs_duckdb(args.passes, tmp / "ch"))
        if args.parquet_passes:
            result.update(parquet_diagnose(args.parquet_passes, tmp / "pq", compare_store=args.compare_store))
        if args.replicate:
            result.update(parquet_diagnose_replicated(tmp, args.replicate))
        if args.store_pass_table:
            result.update(store_pass_table(args.store_pass_table, tmp / "kept"))
    finally:
        if not args.tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    if args.note:
        result["notes"] = args.note
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result.get("clickhouse_findings_match_duckdb", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
