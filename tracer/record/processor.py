"""QueueingSpanProcessor: hands finished spans to an exporter on a background thread, in batches.

At its cap the queue drops its oldest span for the new one (the store writer's policy); unlike a silent drop, that is counted (``health.counters()['dropped_spans']``) and warned about
once. ``force_flush`` and ``shutdown`` drain the queue, so a short script loses nothing. ``shutdown`` is
bounded by ``shutdown_timeout_s`` (or a deadline set before it): what is still queued then is dropped and
counted, and the export thread has ended when it returns.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from llmtrace.tracer.record import health

# What shutdown allows past its deadline, in all, for work already under way (a batch converting, an INSERT
# committing: a thread left inside DuckDB while the interpreter finalizes aborts the process).
SHUTDOWN_GRACE_S = 2.0


class QueueingSpanProcessor(SpanProcessor):
    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue: int = 200_000,
        batch_size: int = 20_000,
        interval_s: float = 0.5,
        name: str = "store",
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.name = name
        self.shutdown_timeout_s = shutdown_timeout_s
        self.dropped = 0
        self._deadline: float | None = None
        self._queue: deque[ReadableSpan] = deque()
        self._wake = threading.Event()
        self._drain_lock = threading.Lock()
        self._stopped = False
        self._in_flight = 0  # spans of the batch the export thread is exporting now
        self._abandoned = False  # shutdown gave up on the export thread (and counted its batch)
        self._thread = threading.Thread(target=self._run, name=f"llmtrace-{name}-export", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def set_deadline(self, deadline: float) -> None:
        """Nothing waits past ``deadline`` (``time.monotonic()``); passed on to the exporter when it can take it."""
        self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
        set_exporter_deadline = getattr(self.exporter, "set_deadline", None)
        if callable(set_exporter_deadline):
            set_exporter_deadline(self._deadline)

    def _drop(self, n: int, message: str | None) -> None:
        self.dropped += n
        health.count("dropped_spans", n, message)

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped:
            self._drop(1, None)  # ended after shutdown: counted, reported with the shutdown total
            return
        if len(self._queue) >= self.max_queue:
            # the store's one loss policy (storage/span_writer.py): the oldest goes, the newest is what
            # someone is looking at
            try:
                self._queue.popleft()
            except IndexError:  # the export thread emptied it meanwhile: nothing to drop
                pass
            else:
                self._drop(1, f"{self.name} export queue full ({self.max_queue}); oldest spans dropped")
        self._queue.append(span)
        if len(self._queue) >= self.batch_size:
            self._wake.set()

    def _drain_once(self) -> int:
        batch: list[ReadableSpan] = []
        q = self._queue
        while q and len(batch) < self.batch_size:
            batch.append(q.popleft())
        if batch:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self._drop(len(batch), None)  # past the shutdown deadline: counted, reported by shutdown
                return len(batch)
            self._in_flight = len(batch)
            try:
                self.exporter.export(batch)
            except Exception as exc:  # exporters should not raise; if one does, count and go on
                if not self._abandoned:
                    self._drop(len(batch), f"{self.name} exporter raised {exc!r}")
            finally:
                self._in_flight = 0
        return len(batch)

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            with self._drain_lock:
                while self._drain_once():
                    pass

    def _remaining(self, timeout_s: float) -> float:
        if self._deadline is None:
            return timeout_s
        return max(0.0, min(timeout_s, self._deadline - time.monotonic()))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if not self._drain_lock.acquire(timeout=self._remaining(timeout_millis / 1000)):
            return False
        try:
            while self._drain_once():
                pass
        finally:
            self._drain_lock.release()
        return bool(self.exporter.force_flush(int(self._remaining(timeout_millis / 1000) * 1000)))

    def shutdown(self) -> None:
        if self._stopped:
            return
        if self._deadline is None:
            self.set_deadline(time.monotonic() + self.shutdown_timeout_s)
        self.force_flush()
        self._stopped = True
        self._wake.set()
        # The thread ends within one batch once the deadline has passed (late batches are dropped, not sent).
        # Every wait below ends by one hard end, the deadline plus SHUTDOWN_GRACE_S: graces given one after
        # the other added up to the deadline plus 6 s on a starved machine (a batch stuck converting).
        hard_end = (self._deadline if self._deadline is not None else time.monotonic()) + SHUTDOWN_GRACE_S
        self._thread.join(timeout=max(0.0, hard_end - time.monotonic()))
        if self._drain_lock.acquire(timeout=max(0.0, hard_end - time.monotonic())):
            try:
                while self._drain_once():
                    pass
            finally:
                self._drain_lock.release()
        else:
            # The export thread is still inside a batch at the hard end: that batch and everything queued
            # are dropped now, and counted here, so the shutdown report has them (the exporter does not
            # count a batch whose conversion outlived its shutdown: see DuckDBSpanExporter.export).
            self._abandoned = True
            abandoned = self._in_flight + len(self._queue)
            self._queue.clear()
            if abandoned:
                self._drop(abandoned, None)
        self.exporter.shutdown()
