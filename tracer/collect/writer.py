"""``llmtrace collect``'s writer: a queue of Arrow tables bounded in bytes and the one thread that commits
them to the store, a short transaction each, pausing between them so readers can open the file."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

from llmtrace.tracer.collect.wal import Ticket
from llmtrace.tracer.record.exporter import insert_arrow
from llmtrace.tracer.storage.retention import RetentionPolicy, apply_retention
from llmtrace.tracer.storage.store import write_connection

log = logging.getLogger("llmtrace.collect")
_DATA_ERRORS = (duckdb.DataError, pa.ArrowException)  # a value refused, as opposed to a store not reachable


class SpanWriter:
    """A bounded queue of Arrow tables and the one thread that writes them, a short transaction each."""

    def __init__(self, db: Path, *, max_queue_bytes: int, flush_interval_s: float, max_batch_rows: int,
                 lock_timeout_s: float, retention: RetentionPolicy, retention_interval_s: float,
                 duckdb_threads: int = 1) -> None:
        self.db = db
        self.duckdb_threads = duckdb_threads
        self.max_queue_bytes = max_queue_bytes
        self.flush_interval_s = flush_interval_s
        self.max_batch_rows = max_batch_rows
        self.lock_timeout_s = lock_timeout_s
        self.retention = retention
        self.retention_interval_s = retention_interval_s
        self._queue: deque[tuple[pa.Table, Ticket | None]] = deque()
        self.on_commit: Callable[[list[Ticket]], None] | None = None
        self._queued_bytes = 0  # released only once committed, so a batch being written still counts
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="llmtrace-collect-writer", daemon=True)
        self.written_rows = 0
        self.write_batches = 0
        self.write_errors = 0
        self.last_error: str | None = None
        self.retention_deleted_spans = 0
        self.refused_rows = 0  # spans DuckDB refused (a value it cannot store): dropped, counted, logged
        self._next_retention = time.monotonic() + (0.0 if retention.active else float("inf"))

    def start(self) -> None:
        self._thread.start()

    def offer(self, table: pa.Table, ticket: Ticket | None = None) -> bool:
        """Queue a table; False (nothing queued) when it would take the queue past its byte bound."""
        size = table.nbytes
        with self._cond:
            if self._closing or (self._queued_bytes and self._queued_bytes + size > self.max_queue_bytes):
                return False
            self._queue.append((table, ticket))
            self._queued_bytes += size
            self._queued_rows += table.num_rows
            self._cond.notify()
        return True

    def has_room(self) -> bool:
        return self._queued_bytes < self.max_queue_bytes and not self._closing

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def _take(self) -> list[tuple[pa.Table, Ticket | None]]:
        batch: list[tuple[pa.Table, Ticket | None]] = []
        rows = 0
        with self._cond:
            for t in self._queue:
                if batch and rows + t[0].num_rows > self.max_batch_rows:
                    break
                batch.append(t)
                rows += t[0].num_rows
        return batch

    def _committed(self, batch: list[tuple[pa.Table, Ticket | None]]) -> None:
        with self._cond:
            for entry in batch:
                popped = self._queue.popleft()
                assert popped is entry  # only this thread removes from the queue
                self._queued_bytes -= entry[0].nbytes
                self._queued_rows -= entry[0].num_rows
            self._cond.notify_all()
        tickets = [t for _, t in batch if t is not None]
        if tickets and self.on_commit is not None:
            self.on_commit(tickets)

    def _write(self, batch: list[tuple[pa.Table, Ticket | None]]) -> None:
        tables = [t for t, _ in batch]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        run_retention = time.monotonic() >= self._next_retention
        with write_connection(self.db, timeout_s=self.lock_timeout_s) as conn:
            # One DuckDB thread: the request threads need the other cores for decoding, and on two cores
            # a second DuckDB thread costs more in coordination than it saves.
            conn.execute(f"SET threads = {self.duckdb_threads}")
            if table.num_rows:
                insert_arrow(conn, table)
            if run_retention:
                result = apply_retention(conn, self.retention)
                self.retention_deleted_spans += result.deleted_spans
                if result.deleted_spans:
                    log.info("retention: dropped %d spans (%s)", result.deleted_spans, result.reason)
        if run_retention:
            self._next_retention = time.monotonic() + self.retention_interval_s
        self.written_rows += table.num_rows
        self.write_batches += 1

    def _run(self) -> None:
        backoff = 0.05
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    wait = self._next_retention - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(min(wait, 1.0))
                if self._closing and not self._queue:
                    return
            batch = self._take()
            try:
                try:
                    self._write(batch)
                except _DATA_ERRORS:
                    # DuckDB refuses a value in the batch: that will not pass on a retry, and retrying it
                    # forever would wedge the queue. Write request by request; refuse only what fails.
                    self._isolate(batch)
                    continue
            except Exception as exc:  # StoreError, OSError, anything: keep the data, say why, retry
                self.write_errors += 1
                self.last_error = str(exc)
                log.warning("llmtrace collect: cannot write %d spans to %s yet: %s", sum(t.num_rows for t, _ in batch),
                            self.db, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.05
            self._committed(batch)
            # Batch up the next writes and leave the file free for readers meanwhile. With a backlog the
            # pause shrinks to a short window (a reader retrying every ~0.1 s still gets in within a few
            # tries); when the queue is filling up or we are closing, write as fast as DuckDB allows.
            pause = self.flush_interval_s
            with self._cond:
                if self._closing or self._queued_bytes > self.max_queue_bytes // 2:
                    pause = min(pause, 0.02)
                elif self._queued_rows >= self.max_batch_rows // 8:
                    pause = min(pause, 0.05)
                if pause > 0:
                    self._cond.wait_for(lambda: self._closing or self._queued_bytes > self.max_queue_bytes // 2,
                                        timeout=pause)

    def _isolate(self, batch: list[tuple[pa.Table, Ticket | None]]) -> None:
        """One transaction per queued request; a request the store refuses alone is dropped, counted and
        logged. Other errors (the store locked) propagate, leaving the rest queued for the retry."""
        for entry in batch:
            try:
                self._write([entry])
            except _DATA_ERRORS as exc:
                self.refused_rows += entry[0].num_rows
                self.last_error = f"store refused {entry[0].num_rows} spans: {exc}"
                log.error("llmtrace collect: the store refuses %d spans of one request, dropped: %s",
                          entry[0].num_rows, str(exc).splitlines()[0])
            self._committed([entry])

    def close(self, timeout_s: float = 120.0) -> int:
        """Write everything queued, then stop. Returns the spans that could not be written in time."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return self._queued_rows
