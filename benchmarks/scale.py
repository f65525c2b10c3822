"""Fleet scale: every analyzer on ClickHouse (chdb, in-process) against DuckDB on the same spans, and
``diagnose --parquet`` over a big export. Writes benchmarks/results/scale.json.

    python benchmarks/scale.py                         # ClickHouse vs DuckDB, 10k passes (400k spans)
    python benchmarks/scale.py --passes 2000 --parquet-passes 1000000

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
        t = time.perf_counter()
        found = run_analyzers(ch)
        out["clickhouse_diagnose_s"] = round(time.perf_counter() - t, 2)
        out["clickhouse_statements"] = ch.statements
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


def parquet_diagnose(passes: int, tmp: Path) -> dict[str, object]:
    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.cli.export import export_parquet
    from llmtrace.tracer.storage.store import parquet_connection

    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {"diagnose_parquet_passes": passes, "diagnose_parquet_spans": passes * 40}
    t = time.perf_counter()
    db = make_store(tmp / "big.duckdb", passes=passes, seed=0)
    out["parquet_make_store_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    export_parquet(db, tmp / "export")
    out["parquet_export_s"] = round(time.perf_counter() - t, 1)
    out["parquet_gb"] = round(sum(f.stat().st_size for f in (tmp / "export").rglob("*.parquet")) / 1e9, 3)
    os.remove(db)
    t = time.perf_counter()
    conn = parquet_connection(str(tmp / "export" / "**" / "*.parquet"))
    try:
        found = run_analyzers(conn)
    finally:
        conn.close()
    key = "diagnose_parquet_s_1m" if passes == 1_000_000 else f"diagnose_parquet_s_{passes}"
    out[key] = round(time.perf_counter() - t, 1)
    out["diagnose_parquet_findings"] = len(found)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=10_000, help="passes for the ClickHouse vs DuckDB run (0: skip)")
    ap.add_argument("--parquet-passes", type=int, default=0, help="passes for diagnose --parquet (1000000: the 1M)")
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
            result.update(parquet_diagnose(args.parquet_passes, tmp / "pq"))
    finally:
        if not args.tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result.get("clickhouse_findings_match_duckdb", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
