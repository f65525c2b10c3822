"""``llmtrace collect``: an OTLP/HTTP trace receiver that writes into the DuckDB store.

Request threads decode each body into the store's rows (``storage/span_rows``) and hand the Arrow table
to the store writer the in-app exporter uses too (``storage/span_writer``), through a queue bounded in
bytes. Past ``max_queue_bytes`` a request is answered 429 with Retry-After (the stock OTLP exporters back
off and retry), so memory stays bounded however fast the senders are; the writer's own cap (drop the
oldest, counted) sits at twice that, for the requests already being decoded. The writer opens the store
for one short transaction per batch and closes it again, and pauses between batches, so ``llmtrace
explore`` / ``llmtrace sql`` (other processes) can open the file in between: DuckDB lets one process hold
a file at a time. A batch that cannot be written stays queued and is retried; ``stop()`` (SIGTERM)
stops taking requests and writes everything already accepted before returning. Each accepted body is in
the write-ahead log (``collect_wal``, fsync'ed) before its 200, so a collector killed with spans still
queued loses none of them: the next start replays them.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa

from llmtrace.tracer.collect.conns import Conn, ConnectionTable, Timeouts
from llmtrace.tracer.collect.http import drain, export_response, framing_error, status_proto
from llmtrace.tracer.collect.otlp_decode import Decoded, PayloadError, PayloadTooLarge, decode
from llmtrace.tracer.collect.otlp_join import ResponseIdJoin
from llmtrace.tracer.collect.otlp_mapping import Mapper
from llmtrace.tracer.collect.otlp_sglang import SliceLinker, link_slices
from llmtrace.tracer.collect.wal import Record, Ticket, WriteAheadLog, replay, wal_dir
from llmtrace.tracer.record import capture, health
from llmtrace.tracer.storage.retention import RetentionPolicy
from llmtrace.tracer.storage.span_writer import SpanWriter
from llmtrace.tracer.storage.store import write_connection

log = logging.getLogger("llmtrace.collect")
TRACES_PATH = "/v1/traces"
GET_ROUTES = frozenset({"/", "/stats", "/healthz"})
_HEX_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DEC_SIZE = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    db: Path
    host: str = "127.0.0.1"
    port: int = 4318
    token: str | None = None
    max_body_bytes: int = 32 << 20  # as sent (maybe compressed)
    max_decoded_bytes: int = 128 << 20  # after gunzip
    max_queue_bytes: int = 256 << 20  # Arrow bytes accepted but not yet committed
    flush_interval_s: float = 0.2  # pause between write transactions: batching, and room for readers
    max_batch_rows: int = 250_000
    lock_timeout_s: float = 10.0  # opening the store at start and replaying the log; the writer retries on
    max_connections: int = 128
    max_connections_per_client: int = 64
    timeouts: Timeouts = field(default_factory=Timeouts)
    capture: str = "hashes"
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    retention_interval_s: float = 60.0
    duckdb_threads: int = 1
    wal: bool = True  # log each accepted body (fsync'ed) before the 200: nothing acknowledged is lost
    fsync: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        for name in ("max_body_bytes", "max_decoded_bytes", "max_queue_bytes", "max_batch_rows", "max_connections",
                     "max_connections_per_client", "duckdb_threads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.flush_interval_s < 0 or self.retention_interval_s <= 0:
            raise ValueError("flush_interval_s must be >= 0 and retention_interval_s > 0")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: socketserver's 5 drops SYNs (1 s client retries) in a burst
    collector: Collector
    conns: ConnectionTable

    def process_request(self, request: Any, client_address: Any) -> None:  # a TCP socket, (host, port)
        # Bounded threads: a slot per connection (a stalled one is closed to make room, collect_conns);
        # with every slot busy working, a plain 503 and the connection is closed at once.
        if self.conns.admit(request, str(client_address[0])) is None:
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                                b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            conn = self.conns.lookup(request)
            if conn is not None:
                self.conns.release(conn)

    def handle_error(self, request: object, client_address: object) -> None:
        # a client that vanished mid-request (or a connection the watchdog closed): no traceback on stderr
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmtrace-collect"
    timeout = 120  # seconds a connection may sit idle or trickle a body before it is closed
    server: _Server

    _linger = False  # an error answered before the body was read: drain a little so the client sees it
    conn: Conn | None = None

    def setup(self) -> None:
        super().setup()
        self.conn = self.server.conns.lookup(self.request)

    def handle_one_request(self) -> None:
        conn = self.conn
        if conn is not None:
            if conn.state != "new":  # between keep-alive requests: idle until the next one starts
                self.server.conns.enter(conn, "idle")
                try:
                    if not self.rfile.peek(1):  # type: ignore[attr-defined]
                        self.close_connection = True
                        return
                except OSError:
                    self.close_connection = True
                    return
            self.server.conns.enter(conn, "headers")
        super().handle_one_request()

    def finish(self) -> None:
        super().finish()
        if self._linger:
            drain(self.connection)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    # -- responses ------------------------------------------------------------------------------------
    def _reply(self, code: int, body: bytes = b"", ctype: str = "application/x-protobuf",
               headers: dict[str, str] | None = None, close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
            self._linger = True
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, message: str, *, json_body: bool = False, close: bool = False,
               headers: dict[str, str] | None = None) -> None:
        self.server.collector.count(f"http_{code}")
        if json_body:
            body, ctype = json.dumps({"code": code, "message": message}).encode(), "application/json"
        else:
            body, ctype = status_proto(code, message), "application/x-protobuf"
        self._reply(code, body, ctype, headers, close)

    # -- routes ---------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        route = self.path.split("?", 1)[0]
        if route == TRACES_PATH:
            self._not_allowed(route)
        elif route == "/healthz":  # for load balancers and orchestrators: says nothing about the store
            self._reply(200, b'{"status":"ok"}', "application/json")
        elif route in ("/", "/stats"):
            if not self._authorized():  # the counters name the store path and the pid
                return self._error(401, "missing or wrong bearer token", json_body=True,
                                   headers={"WWW-Authenticate": 'Bearer realm="llmtrace"'})
            body = json.dumps(self.server.collector.stats()).encode()
            self._reply(200, body, "application/json")
        else:
            self._error(404, f"no route {self.path}; POST OTLP traces to {TRACES_PATH}", json_body=True)

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self.do_GET()  # the GET answer's head (_reply writes no body for HEAD), as HTTP asks of every GET route

    def do_other(self) -> None:
        """A method HTTP knows that no route here takes: 405 naming the ones it does (BaseHTTPRequestHandler
        would say 501, "the server does not know this method", which is wrong for PUT on /v1/traces)."""
        route = self.path.split("?", 1)[0]
        if route == TRACES_PATH or route in GET_ROUTES:
            return self._not_allowed(route)
        return self._error(404, f"no route {self.path}; POST OTLP traces to {TRACES_PATH}",
                           json_body=self._as_json(), close=True)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_other  # noqa: N815 - stdlib naming

    def _not_allowed(self, route: str) -> None:
        allow = "POST" if route == TRACES_PATH else "GET, HEAD"
        # close: a body that came with it (PUT, PATCH) is not read, so the connection cannot carry another request
        self._error(405, f"{self.command} is not allowed on {route} (allowed: {allow})", json_body=self._as_json(),
                    close=True, headers={"Allow": allow})

    def _as_json(self) -> bool:
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower() == "application/json"

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        c = self.server.collector
        ctype = self.headers.get("Content-Type", "application/x-protobuf")
        as_json = self._as_json()
        if self.path.split("?", 1)[0] != TRACES_PATH:
            return self._error(404, f"no route {self.path}; POST OTLP traces to {TRACES_PATH}", json_body=as_json,
                               close=True)
        if c.config.token is not None:
            if not self._authorized():
                return self._error(401, "missing or wrong bearer token", json_body=as_json, close=True,
                                   headers={"WWW-Authenticate": 'Bearer realm="llmtrace"'})
            if self.conn is not None:
                self.conn.authed = True  # the last to be closed when slots run short
        if self.conn is not None:
            self.server.conns.enter(self.conn, "body")
        limit = c.config.max_body_bytes
        length_text = self.headers.get("Content-Length")
        te = self.headers.get("Transfer-Encoding")
        framing = framing_error(self.headers.get_all("Content-Length") or [], te)
        if framing is not None:  # two readings of where the body ends: the smuggling shape, refused as serve does
            return self._error(400, framing, json_body=as_json, close=True)
        if te is not None and te.split(",")[-1].strip().lower() != "chunked":
            return self._error(400, f"unsupported Transfer-Encoding {te[:40]!r} (chunked only)", json_body=as_json,
                               close=True)
        if te is not None:
            try:
                body = self._read_chunked(limit)
            except PayloadTooLarge as exc:
                return self._error(413, str(exc), json_body=as_json, close=True)
            except (ValueError, OSError) as exc:
                if self._timed_out():
                    return self._error(408, "request body too slow", json_body=as_json, close=True)
                return self._error(400, f"bad chunked body: {exc}", json_body=as_json, close=True)
        elif length_text is None:
            return self._error(411, "Content-Length (or chunked encoding) is required", json_body=as_json,
                               close=True)
        else:
            if not _DEC_SIZE.fullmatch(length_text.strip()):
                return self._error(400, f"bad Content-Length {length_text[:40]!r}", json_body=as_json, close=True)
            length = int(length_text)
            if length > limit:
                return self._error(413, f"body of {length} bytes is over the {limit} byte limit",
                                   json_body=as_json, close=True)
            try:
                body = self._read_exact(length)
            except (ValueError, OSError):
                if self._timed_out():
                    return self._error(408, "request body too slow", json_body=as_json, close=True)
                return self._error(400, "body shorter than Content-Length", json_body=as_json, close=True)
        if self.conn is not None:
            self.server.conns.enter(self.conn, "busy")
        if c.closing:
            return self._error(503, "collector is shutting down", json_body=as_json, close=True,
                               headers={"Retry-After": "1"})
        if not c.writer.has_room():
            return self._overloaded(as_json)
        with c.in_flight():
            decoded, ticket = self._accept(c, body, ctype, as_json)
            if decoded is None:
                return None
            if ticket is not None and c.wal is not None:
                try:
                    c.wal.sync(ticket)  # the 200 waits for the disk
                except OSError as exc:
                    return self._error(503, f"cannot sync the write-ahead log: {exc}", json_body=as_json,
                                       headers={"Retry-After": "1"})
        self._reply(200, *export_response(decoded.rejected, decoded.reason, as_json))

    def _accept(self, c: Collector, body: bytes, ctype: str, as_json: bool) -> tuple[Decoded | None, Ticket | None]:
        """Decode, log and queue one body; (None, None) once an error has been answered."""
        with c.decoding:
            try:
                decoded = decode(body, ctype, self.headers.get("Content-Encoding"),
                                 max_bytes=c.config.max_decoded_bytes, mapper=c.mapper)
            except PayloadTooLarge as exc:
                self._error(413, str(exc), json_body=as_json)
                return None, None
            except PayloadError as exc:
                self._error(400, str(exc), json_body=as_json)
                return None, None
            except Exception as exc:  # noqa: BLE001 - a body we cannot read gets an answer, never a dead socket
                log.warning("llmtrace collect: cannot read a %s body", ctype, exc_info=True)
                self._error(400, f"cannot read the body: {type(exc).__name__}: {str(exc)[:200]}", json_body=as_json)
                return None, None
        ticket = None
        if decoded.table.num_rows:
            if not c.writer.has_room(decoded.table.nbytes):  # filled up while this one was decoded
                self._overloaded(as_json)
                return None, None
            if c.wal is not None:
                try:
                    ticket = c.wal.append(body, ctype, self.headers.get("Content-Encoding"))
                except OSError as exc:
                    self._error(503, f"cannot write the write-ahead log: {exc}", json_body=as_json,
                                headers={"Retry-After": "1"})
                    return None, None
            if decoded.open_traces:  # before the offer: the batch that takes these rows must find them
                c.slices.expect(set(decoded.open_traces))
            c.writer.offer(decoded.table, ticket)
        c.accepted(decoded)
        return decoded, ticket

    def _read_chunked(self, limit: int) -> bytes:
        """A Transfer-Encoding: chunked body (JavaScript exporters stream gzip this way), up to ``limit``.

        Chunk sizes are strict hex (no sign, no ``0x``, at most 16 digits): ``int(x, 16)`` alone takes
        ``-1``, and ``read(-1)`` then reads to EOF with no cap at all. Decoded bytes are counted as they
        come, so the cap holds however the body is split."""
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1026)
            if not line.endswith(b"\n"):
                raise ValueError("chunk size line too long or truncated" if line else "truncated chunked body")
            size_text = line.split(b";", 1)[0].strip()
            if not _HEX_SIZE.fullmatch(size_text):
                raise ValueError(f"malformed chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                for _ in range(64):  # trailers, bounded
                    if self.rfile.readline(1026) in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
                raise ValueError("too many trailer lines")
            if total + size > limit:
                raise PayloadTooLarge(f"chunked body is over the {limit} byte limit")
            parts.append(self._read_exact(size))
            total += size
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise ValueError("chunk not followed by CRLF")

    def _read_exact(self, n: int) -> bytes:
        """``n`` bytes of body, read in pieces (never one allocation the client sized), or ValueError."""
        pieces: list[bytes] = []
        left = n
        conn = self.conn
        while left > 0:
            piece = self.rfile.read1(min(left, 1 << 16))
            if not piece:
                raise ValueError(f"body ended {left} bytes early")
            pieces.append(piece)
            left -= len(piece)
            if conn is not None:
                conn.body_bytes += len(piece)  # progress, for the watchdog's minimum rate
        return b"".join(pieces)

    def _authorized(self) -> bool:
        token = self.server.collector.config.token
        if token is None:
            return True
        auth = self.headers.get("Authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        return hmac.compare_digest(given.encode(), token.encode())

    def _timed_out(self) -> bool:
        return self.conn is not None and self.conn.killed

    def _overloaded(self, as_json: bool) -> None:
        self._error(429, "collector queue is full; retry later", json_body=as_json, headers={"Retry-After": "1"})


class Collector:
    """The receiver and its writer; ``start()`` serves on a background thread, ``stop()`` flushes."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.mapper = Mapper(config.capture)
        self.wal = WriteAheadLog(wal_dir(Path(config.db)), fsync=config.fsync) if config.wal else None
        done = self.wal.done if self.wal is not None else None
        self.join = ResponseIdJoin()  # client and engine spans into one trace by response id (otlp_join.py)
        self.slices = SliceLinker(rows=self.join.rows)  # SGLang's slices under their request (otlp_sglang.py)
        self.slices.expect(set())  # the store link only for traces a request could not link itself
        # Committed or dropped, a request's spans no longer need their log segment.
        self.writer = SpanWriter(
            Path(config.db), max_queue_bytes=2 * config.max_queue_bytes, admit_bytes=config.max_queue_bytes,
            flush_interval_s=config.flush_interval_s, max_batch_rows=config.max_batch_rows,
            retention=config.retention, retention_interval_s=config.retention_interval_s,
            duckdb_threads=config.duckdb_threads, on_commit=done, on_drop=done,
            name="collect", retry_log_level=logging.WARNING, on_insert=self._after_insert,
        )
        self.conns = ConnectionTable(config.max_connections, config.max_connections_per_client, config.timeouts)
        self.replayed = (0, 0)  # spans written from a dead collector's log at start, and already stored
        self.closing = False
        # Decoding holds the GIL anyway; a few at a time bound the Arrow tables being built at once.
        self.decoding = threading.BoundedSemaphore(4)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self._counts: dict[str, int] = {"requests_ok": 0, "spans_received": 0, "spans_accepted": 0,
                                        "spans_rejected": 0}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server else self.config.port

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def accepted(self, decoded: Decoded) -> None:
        with self._lock:
            self._counts["requests_ok"] += 1
            self._counts["spans_received"] += decoded.received
            self._counts["spans_accepted"] += decoded.received - decoded.rejected
            self._counts["spans_rejected"] += decoded.rejected

    def in_flight(self) -> _InFlight:
        return _InFlight(self)

    def stats(self) -> dict[str, object]:
        with self._lock:
            out: dict[str, object] = dict(self._counts)
        w = self.writer
        out.update(rows_written=w.written_rows, rows_queued=w.queued_rows, write_batches=w.write_batches,
                   write_errors=w.write_errors, last_write_error=w.last_error, rows_refused_by_store=w.refused_rows,
                   rows_dropped=w.dropped_rows, sanitized_values=health.counters().get("sanitized_values", 0),
                   retention_deleted_spans=w.retention_deleted_spans, db=str(self.config.db), pid=os.getpid(),
                   traces_joined_by_response_id=self.join.joined)
        out.update(self.conns.stats())
        if self.wal is not None:
            out.update(wal_bytes=self.wal.appended_bytes, wal_syncs=self.wal.syncs)
        return out

    def start(self) -> None:
        db = Path(self.config.db)
        with write_connection(db, timeout_s=self.config.lock_timeout_s):
            pass  # create the schema now, and fail early on a bad path or a corrupt file
        # foreign prompts are hashed here: with the store's key, so they match across restarts (and the
        # apps of a fleet that share LLMTRACE_HASH_KEY), not with a key of this process
        capture.use_store_key(db)
        if self.wal is not None:
            # what a collector killed before committing had acknowledged: in the store before we listen
            self.replayed = replay(self.wal.dir, db, self._decode_record, lock_timeout_s=self.config.lock_timeout_s,
                                   max_rows=self.config.max_batch_rows, on_insert=self._after_replay)
            self.wal.open()
        self._server = _Server((self.config.host, self.config.port), _Handler)
        self._server.collector = self
        self._server.conns = self.conns
        self.conns.start()
        self.writer.start()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="llmtrace-collect-http", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 120.0) -> int:
        """Stop taking requests, finish the ones being decoded, write everything accepted.
        Returns the number of accepted spans that could not be written (0 unless the store is unusable)."""
        self.closing = True
        if self._server is not None:
            self._server.shutdown()
        self.conns.stop()
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=30)
        self.writer.set_deadline(time.monotonic() + timeout_s)  # a store locked for good cannot hold us
        lost = self.writer.close(timeout_s + 2.0)
        if self.wal is not None:
            self.wal.close(keep=lost > 0)  # unwritten spans stay in the log for the next start
        if self._server is not None:
            self._server.server_close()
        return lost

    def _after_insert(self, conn: Any, table: pa.Table) -> None:
        """In each batch's transaction: the join by response id, then SGLang's slices linked."""
        self.join.rows.advance(conn, table)
        self.join(conn, table)
        self.slices(conn, table)

    def _after_replay(self, conn: Any, table: pa.Table) -> None:
        self.join.rows.advance(conn, table)  # a fresh process: no bound for a window, every row looked at
        self.join.replayed(conn, table)
        link_slices(conn, table, self.join.rows)  # a dead process's unfinished traces are not known: every batch

    def _decode_record(self, rec: Record) -> pa.Table:
        return decode(rec.body, rec.content_type, rec.content_encoding,
                      max_bytes=self.config.max_decoded_bytes, mapper=self.mapper).table


class _InFlight:
    __slots__ = ("_c",)

    def __init__(self, c: Collector) -> None:
        self._c = c

    def __enter__(self) -> None:
        with self._c._lock:
            self._c._in_flight += 1

    def __exit__(self, *exc: object) -> None:
        with self._c._idle:
            self._c._in_flight -= 1
            self._c._idle.notify_all()
