"""QueueingSpanProcessor: hands finished spans to an exporter on a background thread, in batches.

Unlike a silent drop, a full queue is counted (``health.counters()['dropped_spans']``) and warned about
once. ``force_flush`` and ``shutdown`` drain the queue, so a short script loses nothing.
"""

from __future__ import annotations

import threading
from collections import deque

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from . import health


class QueueingSpanProcessor(SpanProcessor):
    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue: int = 200_000,
        batch_size: int = 20_000,
        interval_s: float = 0.5,
        name: str = "store",
    ) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.name = name
        self._queue: deque[ReadableSpan] = deque()
        self._wake = threading.Event()
        self._drain_lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"llmtrace-{name}-export", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped:
            return
        if len(self._queue) >= self.max_queue:
            health.count("dropped_spans", 1, f"{self.name} export queue full ({self.max_queue}); spans dropped")
            return
        self._queue.append(span)
        if len(self._queue) >= self.batch_size:
            self._wake.set()

    def _drain_once(self) -> int:
        batch: list[ReadableSpan] = []
        q = self._queue
        while q and len(batch) < self.batch_size:
            batch.append(q.popleft())
        if batch:
            try:
                self.exporter.export(batch)
            except Exception as exc:  # exporters should not raise; if one does, count and go on
                health.count("dropped_spans", len(batch), f"{self.name} exporter raised {exc!r}")
        return len(batch)

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            with self._drain_lock:
                while self._drain_once():
                    pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if not self._drain_lock.acquire(timeout=timeout_millis / 1000):
            return False
        try:
            while self._drain_once():
                pass
        finally:
            self._drain_lock.release()
        return bool(self.exporter.force_flush(timeout_millis))

    def shutdown(self) -> None:
        if self._stopped:
            return
        self.force_flush()
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
        self.exporter.shutdown()
