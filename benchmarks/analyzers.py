"""Benchmark `analyzers`: `diagnose` over a synthetic store of 100k passes (~4M stage spans) with planted
causes; total and per-analyzer seconds, and whether every planted cause was found at the right stage.
``diagnose_s_100k`` builds the passes from the spans (every pass span's JSON: a store make_store or an older
writer wrote; the shared passes table and per-analyzer seconds are this case), ``diagnose_s_100k_kept_passes``
reads them from the per-pass table today's writer keeps beside the same spans (tracer/storage/pass_table.py);
``diagnose_s_100k_one_thread`` is the first with the analyzers run one after another instead of in threads.

    python benchmarks/analyzers.py [--passes 100000] [--store PATH]
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synthetic_store import PLANTED, bench_store  # noqa: E402

from common import diagnose_spans_and_kept, keep_pass_table  # noqa: E402


def main() -> None:
    store = bench_store(__doc__.splitlines()[0])
    path, suffix, tmp = store.path, store.suffix, store.tmp

    from llmtrace.analyzers import ANALYZERS
    from llmtrace.analyzers.core.query import Query
    from llmtrace.tracer.storage.store import read_connection

    results: dict[str, object] = {"passes": store.args.passes, "store_build_s": round(store.build_s, 2)}
    # The same store with the pass table its writer keeps (tracer/storage/pass_table.py: a store the
    # collector or the in-app exporter wrote has it; make_store writes spans alone): a copy, so the store
    # named by --store stays as it was. The passes then come from that table instead of every pass span's JSON.
    kept = Path(tmp.name) / "kept.duckdb"
    shutil.copy(path, kept)
    keep_pass_table(kept)
    # alternated rounds (benchmarks/common.py, shared with scale.py --store-pass-table), each timed after a
    # warm run on its connection (one connection, warm runs: how the d50ff3b baseline was measured); the
    # best of three counts
    # ("_one_thread": the analyzers one by one, as before they ran in threads; side by side in the same rounds)
    runs = diagnose_spans_and_kept(path, kept, rounds=3, warm=True, one_thread=True)
    for label, mode in (("_kept_passes", "kept"), ("", "spans"), ("_one_thread", "spans_one_thread")):
        results[f"diagnose_s_{suffix}{label}"] = round(min(r.wall_s for r in runs[mode]), 3)
        # CPU seconds of this process (DuckDB's threads included): on a busy shared machine the wall
        # time above includes waiting for the CPU; this does not.
        results[f"diagnose_cpu_s_{suffix}{label}"] = round(min(r.cpu_s for r in runs[mode]), 3)
    findings = runs["spans"][-1].findings  # what `llmtrace diagnose` finds
    results["load_average_1m"] = round(os.getloadavg()[0], 2)
    with read_connection(path) as conn:
        results["spans"] = conn.execute("SELECT count(*) FROM spans").fetchone()[0]  # type: ignore[index]
        q = Query(conn)
        t = time.perf_counter()
        q.materialize()
        results["shared_passes_table_s"] = round(time.perf_counter() - t, 3)
        try:
            for symptom, analyzer in ANALYZERS.items():
                t = time.perf_counter()
                analyzer.analyze(conn, query=q)  # type: ignore[call-arg]
                results[f"{symptom}_s"] = round(time.perf_counter() - t, 3)
        finally:
            q.release()
    found = 0
    for symptom, stage in PLANTED.items():
        # a merged finding explains every symptom and crosses every stage it lists
        ok = any(symptom in (f.symptoms or (f.symptom,)) and stage in (f.stages or (f.stage,)) for f in findings)
        results[f"found_{symptom}"] = int(ok)
        found += ok
    results["planted_causes"] = len(PLANTED)
    results["planted_causes_found"] = found
    results["findings"] = len(findings)
    tmp.cleanup()
    from common import save

    save("analyzers", results)


if __name__ == "__main__":
    main()
