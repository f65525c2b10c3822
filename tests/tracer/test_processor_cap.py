"""The app-side span queue at its cap drops its oldest span for the new one, counted (the one loss policy the
store writer also follows), so a burst keeps the newest spans."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmtrace.tracer.record import health
from llmtrace.tracer.record.processor import QueueingSpanProcessor


def test_a_full_queue_drops_the_oldest_span_and_counts_it() -> None:
    exporter = InMemorySpanExporter()
    # no batch ever fills and the thread sleeps long: the 15 spans wait in the queue until the flush
    proc = QueueingSpanProcessor(exporter, max_queue=10, batch_size=1000, interval_s=3600)
    provider = TracerProvider()
    provider.add_span_processor(proc)
    before = health.counters().get("dropped_spans", 0)
    tracer = provider.get_tracer("cap")
    for i in range(15):
        tracer.start_span(f"s{i}").end()
    assert proc.force_flush()
    assert [s.name for s in exporter.get_finished_spans()] == [f"s{i}" for i in range(5, 15)]
    assert proc.dropped == 5 and health.counters()["dropped_spans"] - before == 5
    provider.shutdown()
