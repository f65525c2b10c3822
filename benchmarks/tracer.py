"""Benchmark `tracer`: cost of recording one stage span, and how fast the store ingests spans.

- span_record_us_median: one stage span with 5 boundary values, timed on the recording thread while the
  DuckDB exporter runs in the background (median over many spans).
- store_ingest_spans_per_s: spans converted to Arrow and committed in DuckDB, end to end through the
  exporter (batches of 20,000 as the processor hands them over; the clock stops when the last is committed).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llmtrace  # noqa: E402
from common import save  # noqa: E402
from llmtrace.tracer import recording as rec  # noqa: E402
from llmtrace.tracer.exporter import DuckDBSpanExporter  # noqa: E402
from llmtrace.tracer.store import read_connection  # noqa: E402

N_RECORD = int(os.environ.get("BENCH_SPANS", "100000"))
VALUES = {
    "llmtrace.prefix.hit_tokens": 480,
    "gen_ai.usage.cache_read.input_tokens": 480,
    "llmtrace.prefix.first_miss_token": 481,
    "llmtrace.prefix.key": "9f2c4e1a0b3d5f67",
    "llmtrace.observed": True,
}


def bench_record(db: Path) -> tuple[float, float]:
    llmtrace.init(db=db, service_name="bench")
    samples: list[int] = []
    p = rec.start_pass("bench-model")
    clock = time.perf_counter_ns
    for i in range(N_RECORD):
        if i % 40 == 0:
            p.end()
            p = rec.start_pass("bench-model")
        t0 = clock()
        with rec.stage("cache.prefix_match", VALUES, parent=p):
            pass
        samples.append(clock() - t0)
    p.end()
    t0 = time.perf_counter()
    llmtrace.shutdown()
    flush_s = time.perf_counter() - t0
    return statistics.median(samples) / 1000, flush_s


def bench_ingest(db: Path) -> float:
    """Build real ReadableSpans once, then time exporting them into a fresh store in processor-sized batches."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    rec.configure(provider.get_tracer("bench"))
    total = 200_000
    p = rec.start_pass("bench-model")
    for i in range(total):
        if i % 40 == 0:
            p.end()
            p = rec.start_pass("bench-model")
        with rec.stage("cache.prefix_match", VALUES, parent=p):
            pass
    p.end()
    spans = mem.get_finished_spans()
    rec.configure(None)
    exporter = DuckDBSpanExporter(db)
    batch = 20_000
    t0 = time.perf_counter()
    for i in range(0, len(spans), batch):
        exporter.export(spans[i : i + batch])
    exporter.force_flush()  # counted once committed
    elapsed = time.perf_counter() - t0
    exporter.shutdown()
    with read_connection(db) as conn:
        stored = conn.execute("SELECT count(*) FROM spans").fetchall()[0][0]
    if stored != len(spans):
        raise SystemExit(f"ingest lost spans: {stored} of {len(spans)}")
    return stored / elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        record_us, flush_s = bench_record(Path(tmp) / "record.duckdb")
        with read_connection(Path(tmp) / "record.duckdb") as conn:
            stored = conn.execute("SELECT count(*) FROM spans WHERE stage IS NOT NULL").fetchall()[0][0]
        ingest = bench_ingest(Path(tmp) / "ingest.duckdb")
    save("tracer", {
        "span_record_us_median": round(record_us, 2),
        "spans_recorded": N_RECORD,
        "spans_stored_after_shutdown": stored,
        "shutdown_flush_s": round(flush_s, 2),
        "store_ingest_spans_per_s": round(ingest),
        "target_span_record_us_median": 30,
        "target_store_ingest_spans_per_s": 100_000,
    })


if __name__ == "__main__":
    main()
