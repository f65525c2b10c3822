"""The one store writer: span batches (Arrow tables of ``span_rows``) into the DuckDB store, with one loss policy.

Both the in-app exporter (``record/exporter.py``) and ``llmtrace collect`` hand their converted batches to
a ``SpanWriter``; one thread of its own commits them, a short transaction per batch (several queued
batches go into one, up to ``max_batch_rows``), pausing ``flush_interval_s`` between them so other
processes (``llmtrace sql``, ``explore``) can open the file: DuckDB lets one process hold it at a time.

The policy, the same for both:

- ``offer`` never blocks and never raises. The queue is bounded in Arrow bytes (``max_queue_bytes``);
  past it, the *oldest* waiting batches are dropped (the newest data is what someone is looking at).
  ``has_room`` lets a caller that can push back (the collector answers 429) stop before the cap.
- A store locked by another process is retried in short attempts for as long as it takes; meanwhile the
  queue fills and the cap applies. Other passing errors (a full disk) are retried with a backoff.
- A store that cannot be one (not a DuckDB file, no such directory, ``max_store_bytes`` reached) drops the
  batch at once: retrying would not help. A batch DuckDB refuses for one value is written request by
  request and only the refused one is dropped.
- Every drop is counted (``span_rows.count``: ``dropped_spans`` and ``dropped_spans_<why>``, warned
  once per why) and reported to ``on_drop`` with the batches' tokens.
- ``set_deadline`` bounds every wait; ``close`` stops the thread (by the deadline, if one is set) and
  returns what is still queued, which the caller either drops (``drop_queued``) or keeps (the
  collector's write-ahead log replays it at the next start).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from llmtrace.tracer.storage import pass_table, span_rows
from llmtrace.tracer.storage.attached import AttachedStore
from llmtrace.tracer.storage.retention import RetentionPolicy, apply_retention
from llmtrace.tracer.storage.store import StoreBusy, StoreError

log = logging.getLogger("llmtrace")
_DATA_ERRORS = (duckdb.DataError, pa.ArrowException)  # a value refused (ConversionException is a DataError)
# While another process holds the store the writer tries once, then waits 50-150 ms: the pace of a reader's
# retries at their slowest (storage/store.py), so readers get their turn; a deadline is seen at once.
_RETRY_S = (0.05, 0.15)


class _StoreFull(StoreError):
    """The store file reached ``max_store_bytes``."""


@dataclass(slots=True, eq=False)
class _Entry:
    table: pa.Table
    token: object  # the caller's (the collector's write-ahead log ticket), handed back on commit or drop
    rows: int
    nbytes: int


class SpanWriter:
    """A bounded queue of span batches and the one thread that commits them to the store at ``db``."""

    def __init__(self, db: str | Path, *, max_queue_bytes: int = 256 << 20, admit_bytes: int | None = None,
                 flush_interval_s: float = 0.0, max_batch_rows: int = 250_000,
                 retention: RetentionPolicy | None = None, retention_interval_s: float = 60.0,
                 max_store_bytes: int | None = None, duckdb_threads: int | None = None,
                 on_commit: Callable[[list[Any]], None] | None = None,
                 on_drop: Callable[[list[Any]], None] | None = None, name: str = "store",
                 retry_log_level: int = logging.INFO,
                 on_insert: Callable[[duckdb.DuckDBPyConnection, pa.Table], None] | None = None) -> None:
        self.db = Path(db)
        self.max_queue_bytes = max_queue_bytes
        self.admit_bytes = max_queue_bytes if admit_bytes is None else admit_bytes
        self.flush_interval_s = flush_interval_s
        self.max_batch_rows = max_batch_rows
        self.retention = retention or RetentionPolicy()
        self.retention_interval_s = retention_interval_s
        self.max_store_bytes = max_store_bytes
        self.duckdb_threads = duckdb_threads
        self.on_commit = on_commit
        self.on_drop = on_drop
        # called in each batch's transaction after its insert (the collector's join by response id, which
        # rewrites rows the batch completes: tracer/collect/otlp_join.py); its error fails the batch like an insert's
        self.on_insert = on_insert
        self.retry_log_level = retry_log_level
        self._queue: deque[_Entry] = deque()
        self._taken = 0  # entries at the head being written: never dropped from under the writer
        self._queued_bytes = 0  # released once committed or dropped, so a batch being written still counts
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"llmtrace-{name}-writer", daemon=True)
        self.written_rows = 0
        self.write_batches = 0
        self.write_errors = 0  # attempts that failed and were retried (the store locked, a full disk)
        self.dropped_rows = 0  # every row this writer gave up on, for any reason
        self.refused_rows = 0  # of those, the rows DuckDB refused (a value it cannot store)
        self.last_error: str | None = None  # the latest failure, kept after the writer recovers (stats)
        self._failing = False
        self.retention_deleted_spans = 0
        self._next_retention = time.monotonic() + (0.0 if self.retention.active else float("inf"))
        self._passes = pass_table.PassKeeper()  # the store's per-pass table, kept batch by batch
        self._store = AttachedStore(self.db)  # one DuckDB instance, the file attached a batch (attached.py)

    # -- the caller's side ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def offer(self, table: pa.Table, token: object = None) -> None:
        """Queue a batch. Past the byte cap the oldest waiting batches make room (dropped and counted); a
        batch bigger than the cap alone still goes in, so the bound is the cap plus one batch."""
        entry = _Entry(table, token, table.num_rows, table.nbytes)
        dropped: list[_Entry] = []
        with self._cond:
            closing = self._closing
            if closing:
                dropped.append(entry)
            else:
                while self._queued_bytes + entry.nbytes > self.max_queue_bytes and len(self._queue) > self._taken:
                    dropped.append(self._queue[self._taken])
                    del self._queue[self._taken]
                    self._forget(dropped[-1])
                self._queue.append(entry)
                self._queued_bytes += entry.nbytes
                self._queued_rows += entry.rows
                self._cond.notify()
        if closing:
            self._dropped(dropped, "closed", f"the writer for {self.db} is closed; spans dropped")
        elif dropped:
            self._dropped(dropped, "queue_full", f"the writer for {self.db} is behind (store locked or slow) and its "
                          f"queue reached {self.max_queue_bytes} bytes; the oldest spans were dropped")

    def has_room(self, nbytes: int = 0) -> bool:
        """Whether ``nbytes`` more stay within the admission bound: a caller that can push back (the
        collector's 429) stops here, before the cap drops data. An empty queue always has room."""
        queued = self._queued_bytes
        return not self._closing and (queued == 0 or queued + nbytes <= self.admit_bytes)

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def set_deadline(self, deadline: float) -> None:
        """Nothing waits past ``deadline`` (a ``time.monotonic()`` value): no lock attempt starts after it."""
        with self._cond:
            self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
            self._cond.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued is committed or dropped (bounded by the deadline too)."""
        end = time.monotonic() + timeout_s
        with self._cond:
            if self._deadline is not None:
                end = min(end, self._deadline)
            while self._queue:
                left = end - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def close(self, timeout_s: float = 120.0) -> int:
        """Write what is queued (until the deadline, if set), then stop. Returns the rows still queued."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return self._queued_rows

    def drop_queued(self, message: str | None = None) -> int:
        """Count everything still queued as dropped (after ``close``); returns the rows."""
        with self._cond:
            left = list(self._queue) if not self._thread.is_alive() else list(self._queue)[self._taken:]
            for e in left:
                self._queue.remove(e)
                self._forget(e)
        self._dropped(left, "not_written", message)
        return sum(e.rows for e in left)

    # -- bookkeeping --------------------------------------------------------------------------------------
    def _forget(self, e: _Entry) -> None:  # the caller holds _cond
        self._queued_bytes -= e.nbytes
        self._queued_rows -= e.rows
        self._cond.notify_all()

    def _dropped(self, entries: list[_Entry], why: str, message: str | None) -> None:
        if not entries:
            return
        n = sum(e.rows for e in entries)
        with self._cond:
            self.dropped_rows += n
        if n:
            # Near a deadline (shutdown) whoever set it reports the drops, once, with the total.
            message = message if self._deadline is None else None
            span_rows.count("dropped_spans", n, None)
            span_rows.count(f"dropped_spans_{why}", n, message)
        tokens = [e.token for e in entries if e.token is not None]
        if tokens and self.on_drop is not None:
            self.on_drop(tokens)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    # -- the writer thread --------------------------------------------------------------------------------
    # A batch is taken off the cap's reach only once the store is open for it: while the writer waits for
    # a lock, every queued batch is still the oldest data and can make room for newer (the bound is the
    # cap plus the one batch being inserted).
    def _wait(self) -> bool:
        """Until there is something to do; False when the thread should end."""
        with self._cond:
            while True:
                if self._closing and (not self._queue or self._past_deadline()):
                    return False
                if self._queue and not self._past_deadline():
                    return True
                wait = self._next_retention - time.monotonic()
                if not self._queue and wait <= 0:
                    return True  # retention is due with nothing to write
                self._cond.wait(min(max(wait, 0.0), 1.0) if not self._queue else 0.1)

    def _take(self) -> list[_Entry]:
        """The oldest queued batches up to ``max_batch_rows``, marked as being written."""
        with self._cond:
            batch: list[_Entry] = []
            rows = 0
            for e in self._queue:
                if batch and rows + e.rows > self.max_batch_rows:
                    break
                batch.append(e)
                rows += e.rows
            self._taken = len(batch)
            return batch

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._store.close()

    def _loop(self) -> None:
        span_rows.warm()
        backoff = 0.05
        while self._wait():
            batch: list[_Entry] = []  # filled by _write once the store is open
            try:
                self._write(batch)
            except StoreBusy as exc:
                self._retry_later(exc, random.uniform(*_RETRY_S))
                continue
            except _DATA_ERRORS:
                # DuckDB refuses a value in the batch: that will not pass on a retry, and retrying it
                # forever would wedge the queue. Write batch by batch; drop only what fails.
                self._isolate(batch)
                continue
            except _StoreFull as exc:
                self._give_up(batch, "store_full", f"store {self.db} {exc}; spans dropped")
                continue
            except StoreError as exc:  # not a store, no such directory: a retry would not help
                self._give_up(batch or self._take(), "store_error", f"cannot write spans to {self.db}: {exc}")
                continue
            except Exception as exc:  # OSError (a full disk) and anything else: keep the data, retry
                self._retry_later(exc, backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.05
            self._committed(batch)
            self._pause()

    def _retry_later(self, exc: Exception, sleep_s: float) -> None:
        first = not self._failing
        self._failing = True
        self.write_errors += 1
        self.last_error = str(exc)
        if first:  # once per stretch of failures (the stats say more); drops are what is warned about
            log.log(self.retry_log_level, "llmtrace: cannot write %d spans to %s yet (retrying): %s",
                    self._queued_rows, self.db, exc)
        with self._cond:
            self._taken = 0  # back within the cap's reach
            if sleep_s:
                self._cond.wait_for(lambda: self._closing and self._past_deadline(), timeout=sleep_s)

    def _give_up(self, batch: list[_Entry], why: str, message: str) -> None:
        self.last_error = message
        with self._cond:
            for e in batch:
                self._queue.remove(e)
                self._forget(e)
            self._taken = max(0, self._taken - len(batch))
        self._dropped(batch, why, message)

    def _committed(self, batch: list[_Entry]) -> None:
        with self._cond:
            for e in batch:
                popped = self._queue.popleft()
                assert popped is e  # taken entries are at the head and only this thread removes them
                self._forget(e)
            self._taken = max(0, self._taken - len(batch))
        tokens = [e.token for e in batch if e.token is not None]
        if tokens and self.on_commit is not None:
            self.on_commit(tokens)

    def _pause(self) -> None:
        """Batch up the next writes and leave the file free for readers meanwhile. With a backlog the pause
        shrinks to a short window (a reader retrying every ~0.1 s still gets in within a few tries); when
        the queue is filling up or we are closing, write as fast as DuckDB allows."""
        pause = self.flush_interval_s
        half = self.max_queue_bytes // 2
        with self._cond:
            if self._closing or self._queued_bytes > half:
                pause = min(pause, 0.02)
            elif self._queued_rows >= self.max_batch_rows // 8:
                pause = min(pause, 0.05)
            if pause > 0:
                self._cond.wait_for(lambda: self._closing or self._queued_bytes > half, timeout=pause)

    def _write(self, batch: list[_Entry], only: _Entry | None = None) -> None:
        """Open the store, take the batch (``only`` that entry, already taken), insert it, and run retention
        when it is due, in one transaction."""
        if self.max_store_bytes is not None and self.db.exists() and self.db.stat().st_size >= self.max_store_bytes:
            batch.extend(self._take() if only is None else [only])
            raise _StoreFull(f"reached its size cap ({self.max_store_bytes} bytes)")
        run_retention = time.monotonic() >= self._next_retention
        with self._store.open() as conn:  # one try; _run paces the retries
            batch.extend(self._take() if only is None else [only])
            tables = [e.table for e in batch]
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables) if tables else None
            if self.duckdb_threads is not None:
                # The collector runs one DuckDB thread: its request threads need the other cores to decode.
                conn.execute(f"SET threads = {self.duckdb_threads}")
            keep = pass_table.enabled()
            if keep:  # a rebuild of a big store's passes runs long enough for DuckDB to draw onto the app's stdout
                conn.execute("SET enable_progress_bar = false")
            conn.execute("BEGIN")  # the spans and the pass rows they change commit together (pass_table.py)
            try:
                current = keep and self._passes.is_current(conn, time.monotonic())
                if table is not None and table.num_rows:
                    span_rows.insert_table(conn, table)
                    if keep:
                        self._passes.after_insert(conn, table, current, time.monotonic())
                        current = True
                    if self.on_insert is not None:
                        self.on_insert(conn, table)
                if run_retention:
                    result = apply_retention(conn, self.retention)
                    self.retention_deleted_spans += result.deleted_spans
                    if result.deleted_spans:
                        log.info("retention: dropped %d spans (%s)", result.deleted_spans, result.reason)
                        if keep:
                            self._passes.after_retention(conn, current)
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except duckdb.Error:  # the transaction is gone with the error already
                    pass
                raise
        if run_retention:
            self._next_retention = time.monotonic() + self.retention_interval_s
        if table is not None:
            self.written_rows += table.num_rows
            self.write_batches += 1
        self._failing = False

    def _isolate(self, batch: list[_Entry]) -> None:
        """One transaction per queued batch (they stay taken meanwhile); one the store refuses alone is
        dropped and counted. Another error (the store locked) puts the rest back for the next round."""
        for entry in batch:
            try:
                self._write([], only=entry)
            except _DATA_ERRORS as exc:
                self.refused_rows += entry.rows
                self._give_up([entry], "refused", f"the store {self.db} refused {entry.rows} spans of one "
                              f"batch (dropped): {str(exc).splitlines()[0]}")
                self.last_error = f"store refused {entry.rows} spans: {exc}"
                continue
            except Exception as exc:  # noqa: BLE001 - the rest goes back in the queue, retried
                self._retry_later(exc, 0.05)
                return
            self._committed([entry])
