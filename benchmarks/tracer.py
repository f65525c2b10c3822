"""Benchmark `tracer`: cost of recording one stage span, and how fast the store ingests spans.

- span_record_us_median: one stage span with 5 boundary values, timed on the recording thread while the
  DuckDB exporter runs in the background (median over many spans).
- otel_sdk_span_record_us_median: the peer, measured in the same run, interleaved in blocks of 1,000: the
  OpenTelemetry SDK recording the same span (same name, the same 7 attributes, child of a pass span)
  through a BatchSpanProcessor into a no-op exporter. ``span_record_vs_otel_sdk`` is ours / theirs.
- store_ingest_spans_per_s: spans converted to Arrow and committed in DuckDB, end to end through the
  exporter (batches of 20,000 as the processor hands them over; the clock stops when the last is committed),
  for the spans llmtrace records (light stage spans, SDK pass spans); ``store_ingest_sdk_spans_per_s`` the
  same for spans the SDK itself made (another instrumentation sharing the provider).
- load_avg_start / load_avg_end: the 1-minute load average around the run (the machine may be shared).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.trace import set_span_in_context  # noqa: E402

import llmtrace  # noqa: E402
from common import save  # noqa: E402
from llmtrace.tracer import recording as rec  # noqa: E402
from llmtrace.tracer.record.exporter import DuckDBSpanExporter  # noqa: E402
from llmtrace.tracer.storage.store import read_connection  # noqa: E402

N_RECORD = int(os.environ.get("BENCH_SPANS", "100000"))
VALUES = {
    "llmtrace.prefix.hit_tokens": 480,
    "gen_ai.usage.cache_read.input_tokens": 480,
    "llmtrace.prefix.first_miss_token": 481,
    "llmtrace.prefix.key": "9f2c4e1a0b3d5f67",
    "llmtrace.observed": True,
}


class NoopExporter(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def bench_record(db: Path) -> tuple[float, float, float]:
    """Ours and the SDK's, interleaved in blocks so both see the same machine; returns (ours, sdk, flush)."""
    llmtrace.init(db=db, service_name="bench")
    sdk_provider = TracerProvider()
    sdk_provider.add_span_processor(BatchSpanProcessor(NoopExporter(), max_queue_size=N_RECORD + 1000,
                                                       max_export_batch_size=2048))
    sdk = sdk_provider.get_tracer("bench")
    sdk_attrs = {"llmtrace.stage": "cache.prefix_match", "llmtrace.phase": "cache", **VALUES}
    ours: list[int] = []
    theirs: list[int] = []
    clock = time.perf_counter_ns
    block = 1000
    for start in range(0, N_RECORD, block):
        p = rec.start_pass("bench-model")
        for i in range(start, start + block):
            if i % 40 == 0:
                p.end()
                p = rec.start_pass("bench-model")
            t0 = clock()
            with rec.stage("cache.prefix_match", VALUES, parent=p):
                pass
            ours.append(clock() - t0)
        p.end()
        sdk_pass = sdk.start_span("chat bench-model")
        ctx = set_span_in_context(sdk_pass)
        for i in range(start, start + block):
            if i % 40 == 0:
                sdk_pass.end()
                sdk_pass = sdk.start_span("chat bench-model")
                ctx = set_span_in_context(sdk_pass)
            t0 = clock()
            with sdk.start_span("cache.prefix_match", context=ctx, attributes=sdk_attrs):
                pass
            theirs.append(clock() - t0)
        sdk_pass.end()
    t0 = time.perf_counter()
    llmtrace.shutdown()
    flush_s = time.perf_counter() - t0
    sdk_provider.shutdown()
    return statistics.median(ours) / 1000, statistics.median(theirs) / 1000, flush_s


def record_spans(total: int, *, sdk_only: bool) -> list[object]:
    """``total`` stage spans (and their pass spans) as the exporter receives them."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    if sdk_only:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(mem))
        rec.configure(provider.get_tracer("bench"))
    else:
        llmtrace.init(db="none", service_name="bench", exporters=[mem])
    p = rec.start_pass("bench-model")
    for i in range(total):
        if i % 40 == 0:
            p.end()
            p = rec.start_pass("bench-model")
        with rec.stage("cache.prefix_match", VALUES, parent=p):
            pass
    p.end()
    if sdk_only:
        rec.configure(None)
    else:
        llmtrace.force_flush()
    spans = list(mem.get_finished_spans())
    if not sdk_only:
        llmtrace.shutdown()
    return spans


def bench_ingest(db: Path, *, sdk_only: bool = False) -> float:
    """Build the spans once, then time exporting them into a fresh store in processor-sized batches."""
    spans = record_spans(200_000, sdk_only=sdk_only)
    exporter = DuckDBSpanExporter(db)
    batch = 20_000
    t0 = time.perf_counter()
    for i in range(0, len(spans), batch):
        exporter.export(spans[i : i + batch])  # type: ignore[arg-type]
    # counted once committed; the exporter's default 30 s wait would cut a slow ingest short (and the spans still
    # queued would read as lost)
    if not exporter.force_flush(timeout_millis=600_000):
        raise SystemExit(f"ingest did not finish within 600 s ({exporter.exported} of {len(spans)} spans committed; "
                         f"last store error: {exporter.writer.last_error})")
    elapsed = time.perf_counter() - t0
    exporter.shutdown()
    with read_connection(db) as conn:
        stored = conn.execute("SELECT count(*) FROM spans").fetchall()[0][0]
    if stored != len(spans):
        raise SystemExit(f"ingest lost spans: {stored} of {len(spans)}")
    return stored / elapsed


def main() -> None:
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        record_us, sdk_us, flush_s = bench_record(Path(tmp) / "record.duckdb")
        with read_connection(Path(tmp) / "record.duckdb") as conn:
            stored = conn.execute("SELECT count(*) FROM spans WHERE stage IS NOT NULL").fetchall()[0][0]
        ingest = bench_ingest(Path(tmp) / "ingest.duckdb")
        ingest_sdk = bench_ingest(Path(tmp) / "ingest_sdk.duckdb", sdk_only=True)
    save("tracer", {
        "span_record_us_median": round(record_us, 2),
        "otel_sdk_span_record_us_median": round(sdk_us, 2),
        "span_record_vs_otel_sdk": round(record_us / sdk_us, 3),
        "spans_recorded": N_RECORD,
        "spans_stored_after_shutdown": stored,
        "shutdown_flush_s": round(flush_s, 2),
        "store_ingest_spans_per_s": round(ingest),
        "store_ingest_sdk_spans_per_s": round(ingest_sdk),
        "target_span_record_us_median": 10,
        "target_store_ingest_spans_per_s": 100_000,
        "load_avg_start": round(load_start, 2),
        "load_avg_end": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count() or 0,
        "note": (f"measured under load (load average {load_start:.0f} on {os.cpu_count()} cores, shared machine): "
                 "compare span_record_vs_otel_sdk, measured side by side; absolute numbers are inflated")
        if load_start > (os.cpu_count() or 1) else "measured on a quiet machine",
    })


if __name__ == "__main__":
    main()
