"""``llmtrace collect``'s write-ahead log: no acknowledged span is lost when the collector is killed.

Each accepted request body is appended, as received, to a segment file beside the store and fsync'ed
(one fdatasync covers every request appended before it: group commit) before the 200 goes out. The
writer thread commits spans to DuckDB in its own batches; a segment is deleted once it is full and every
request in it is committed, and all of them on a clean stop. A collector that dies (kill -9, OOM, power
loss) leaves its segments behind; the next ``llmtrace collect`` on the store replays them before it
listens, skipping spans the store already holds (the log and the store are not one transaction, so a
request may be in both).

Segments are named ``<pid>-<start ns>-<n>.wal`` in ``<store>.collect-wal/`` and locked (``flock``) by
the collector writing them, so a second collector on the same store replays only the logs of dead ones.

Record: magic ``LTW1``, meta length, body length, CRC-32 of meta + body (little-endian u32s), the meta
(``content-type\\ncontent-encoding``), the body. A torn or corrupt tail (the process died mid-append, so
that request was never acknowledged) ends the replay of that segment.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    OnInsert = Callable[[duckdb.DuckDBPyConnection, pa.Table], None]

log = logging.getLogger("llmtrace.collect")
_HEADER = struct.Struct("<4sIII")
_MAGIC = b"LTW1"


def wal_dir(db: Path) -> Path:
    return db.with_name(db.name + ".collect-wal")


@dataclass(frozen=True, slots=True)
class Ticket:
    """Where one request's body went: its segment and its sequence number (for the group fsync)."""

    segment: int
    seq: int


@dataclass(slots=True)
class _Segment:
    path: Path
    fd: int
    size: int = 0
    outstanding: int = 0  # requests in it not yet committed to the store
    closed: bool = False  # no more appends (rotated)


class WriteAheadLog:
    def __init__(self, directory: Path, *, segment_bytes: int = 64 << 20, fsync: bool = True) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._lock = threading.Lock()  # appends and segment bookkeeping
        self._sync_lock = threading.Lock()  # one fsync at a time; taken before _lock, never after
        self._segments: dict[int, _Segment] = {}
        self._current = -1
        self._seq = 0
        self._synced = 0
        self._prefix = f"{os.getpid()}-{time.time_ns()}"
        self.appended_bytes = 0
        self.syncs = 0

    # -- writing ------------------------------------------------------------------------------------
    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._rotate()

    def _rotate(self) -> None:
        """A new segment (the caller holds _lock). The old one is fsync'ed first, so a ticket in it is
        durable without a later fsync of its file; its descriptor stays open until it is deleted."""
        old = self._segments.get(self._current)
        if old is not None:
            if self.fsync:
                os.fdatasync(old.fd)
            old.closed = True
        n = self._current + 1
        path = self.dir / f"{self._prefix}-{n:06d}.wal"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if self.fsync:  # the new file's name must survive a power loss too
            dfd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._segments[n] = _Segment(path, fd)
        self._current = n  # the old segment is deleted by done(), which holds _sync_lock: no fsync is on it

    def append(self, body: bytes, content_type: str | None, content_encoding: str | None) -> Ticket:
        meta = f"{content_type or ''}\n{content_encoding or ''}".encode("utf-8", "replace")
        crc = zlib.crc32(body, zlib.crc32(meta))
        record = _HEADER.pack(_MAGIC, len(meta), len(body), crc) + meta + body
        with self._lock:
            seg = self._segments[self._current]
            if seg.size and seg.size + len(record) > self.segment_bytes:
                self._rotate()
                seg = self._segments[self._current]
            view = memoryview(record)
            while view:
                view = view[os.write(seg.fd, view):]
            seg.size += len(record)
            seg.outstanding += 1
            self._seq += 1
            self.appended_bytes += len(record)
            return Ticket(self._current, self._seq)

    def sync(self, ticket: Ticket) -> None:
        """Return once the ticket's record is on disk. Concurrent callers share one fdatasync."""
        if not self.fsync or self._synced >= ticket.seq:
            return
        with self._sync_lock:
            if self._synced >= ticket.seq:
                return
            with self._lock:
                target = self._seq
                fd = self._segments[self._current].fd
            os.fdatasync(fd)  # segments before the current one were fsync'ed when they were rotated
            self.syncs += 1
            self._synced = max(self._synced, target)

    def done(self, tickets: list[Ticket]) -> None:
        """These requests are committed to the store (or were refused): their segments may go."""
        with self._sync_lock, self._lock:
            for t in tickets:
                seg = self._segments.get(t.segment)
                if seg is not None:
                    seg.outstanding -= 1
            for seg in [s for s in self._segments.values() if s.closed and s.outstanding <= 0]:
                self._delete(seg)

    def _delete(self, seg: _Segment) -> None:
        for n, s in list(self._segments.items()):
            if s is seg:
                del self._segments[n]
        try:
            seg.path.unlink()
        except OSError:
            pass
        os.close(seg.fd)

    def close(self, *, keep: bool) -> None:
        """Stop. With ``keep`` (spans not written), the segments stay for the next start to replay."""
        with self._sync_lock, self._lock:
            for seg in list(self._segments.values()):
                if keep:
                    if self.fsync:
                        os.fdatasync(seg.fd)
                    os.close(seg.fd)
                else:
                    self._delete(seg)
            self._segments.clear()


# -- replay ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Record:
    content_type: str | None
    content_encoding: str | None
    body: bytes


def orphan_segments(directory: Path) -> Iterator[tuple[Path, int]]:
    """Segments no live collector holds, oldest first, each yielded with a descriptor that holds its
    lock (the caller closes it after deleting the file)."""
    if not directory.is_dir():
        return
    now = time.time_ns()
    found = []
    for path in directory.glob("*.wal"):
        try:
            found.append((path.stat().st_mtime_ns, path.name, path))
        except OSError:
            continue
    for mtime, _name, path in sorted(found):
        if now - mtime < 1_000_000_000 and path.stat().st_size == 0:
            continue  # a live collector may be between creating this segment and locking it
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live collector's segment
            continue
        yield path, fd


def read_records(path: Path) -> Iterator[Record]:
    data = path.read_bytes()
    pos = 0
    while pos + _HEADER.size <= len(data):
        magic, meta_len, body_len, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        end = start + meta_len + body_len
        if magic != _MAGIC or end > len(data):
            break
        meta, body = data[start:start + meta_len], data[start + meta_len:end]
        if zlib.crc32(body, zlib.crc32(meta)) != crc:
            break
        ctype, _, enc = meta.decode("utf-8", "replace").partition("\n")
        yield Record(ctype or None, enc or None, body)
        pos = end
    if pos < len(data):
        log.warning("llmtrace collect: %s ends in %d bytes of a torn record (never acknowledged); skipped",
                    path.name, len(data) - pos)


def replay(directory: Path, db: Path, decode_record: Callable[[Record], pa.Table], *, lock_timeout_s: float = 10.0,
           max_rows: int = 250_000, on_insert: OnInsert | None = None) -> tuple[int, int]:
    """Write the spans of every orphan segment that the store does not hold yet; delete the segments.
    Returns (spans written, spans already stored). ``decode_record(record)`` gives an Arrow table.

    A record that no longer decodes, or that the store refuses, is skipped with a warning, never a
    collector that cannot start; a segment with a refused record is kept as ``*.wal.bad`` to look at.
    ``on_insert(conn, table)`` runs in each insert's transaction, as the writer's does (the join by
    response id: replayed engine spans follow a join made before the collector died)."""
    written = skipped = 0
    for path, fd in orphan_segments(directory):
        try:
            tables: list[pa.Table] = []
            rows = 0
            clean = True
            for rec in read_records(path):
                try:
                    table = decode_record(rec)
                except Exception as exc:  # noqa: BLE001 - it was decoded once; say so and go on
                    log.warning("llmtrace collect: cannot replay a request in %s: %s", path.name, exc)
                    continue
                tables.append(table)
                rows += table.num_rows
                if rows >= max_rows:
                    w, k, ok = _insert_isolating(db, tables, lock_timeout_s, path, on_insert)
                    written, skipped, clean, tables, rows = written + w, skipped + k, clean and ok, [], 0
            if tables:
                w, k, ok = _insert_isolating(db, tables, lock_timeout_s, path, on_insert)
                written, skipped, clean = written + w, skipped + k, clean and ok
            if clean:
                path.unlink()
            else:
                path.rename(path.with_name(path.name + ".bad"))
        finally:
            os.close(fd)
    return written, skipped


def _insert_isolating(db: Path, tables: list[pa.Table], lock_timeout_s: float, path: Path,
                      on_insert: OnInsert | None = None) -> tuple[int, int, bool]:
    """``_insert_new``, falling back to one request at a time when the store refuses the chunk."""
    from llmtrace.tracer.storage.store import StoreError

    try:
        return (*_insert_new(db, tables, lock_timeout_s, on_insert), True)
    except StoreError:
        raise  # the store cannot be opened at all: the collector cannot start, say so
    except Exception as exc:  # noqa: BLE001 - a value DuckDB refuses: find the request, skip only it
        if on_insert is not None:  # the hook failed (the join turns itself off): the spans again, without it
            return _insert_isolating(db, tables, lock_timeout_s, path)
        if len(tables) == 1:
            log.warning("llmtrace collect: the store refuses a request replayed from %s (kept in %s.bad): %s",
                        path.name, path.name, exc)
            return 0, 0, False
    written = skipped = 0
    clean = True
    for t in tables:
        w, k, ok = _insert_isolating(db, [t], lock_timeout_s, path, on_insert)
        written, skipped, clean = written + w, skipped + k, clean and ok
    return written, skipped, clean


def _insert_new(db: Path, tables: list[pa.Table], lock_timeout_s: float,
                on_insert: OnInsert | None = None) -> tuple[int, int]:
    """Insert the rows whose (trace_id, span_id) the store lacks, once each, in one transaction."""
    import pyarrow as pa

    from llmtrace.tracer.storage.span_rows import insert_table
    from llmtrace.tracer.storage.store import write_connection

    table = pa.concat_tables(tables)
    with write_connection(db, timeout_s=lock_timeout_s) as conn:
        conn.execute("BEGIN")
        try:
            inserted = insert_table(conn, table, skip_stored=True)
            if on_insert is not None:
                on_insert(conn, table)
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - the transaction is gone with the error already
                pass
            raise
    return inserted, table.num_rows - inserted
