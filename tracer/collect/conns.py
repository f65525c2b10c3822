"""``llmtrace collect``'s connections: read deadlines, a cap per client, and stalled ones closed first.

One thread serves each connection, up to ``max_connections``. A connection that holds its thread without
making progress (slowloris: headers trickled, or a body sent a byte at a time) is closed by a watchdog:

- ``header_timeout_s`` from the first byte of a request (or from connect) to the end of its headers;
- ``idle_timeout_s`` between keep-alive requests (the stock exporters reuse one connection);
- ``body_timeout_s`` for the whole body, and after ``header_timeout_s`` of it at least ``min_body_rate``
  bytes a second.

When the cap is reached, a new connection does not get a 503 while stalled ones hold the slots: the
stalled connection that has made the least progress is closed to make room, preferring connections not
yet authenticated (no valid bearer token seen) and the client address holding the most connections
(``max_per_client`` is the most one address may hold). Only when every slot is busy decoding or writing
is the new connection refused. This is what nginx and Go's http.Server do with read deadlines, and
what the OpenTelemetry Collector's ``read_header_timeout`` / ``idle_timeout`` are for.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass

EVICT_GRACE_S = 0.5  # a connection younger than this in its state is not "stalled" yet


@dataclass(slots=True, eq=False)
class Conn:
    sock: socket.socket
    client: str
    state: str  # "new" | "idle" | "headers" | "body" | "busy"
    since: float
    deadline: float
    authed: bool = False
    body_bytes: int = 0
    killed: bool = False  # closed by the watchdog or evicted: the handler answers 408 if it still can


@dataclass(frozen=True, slots=True)
class Timeouts:
    header_s: float = 10.0
    idle_s: float = 60.0
    body_s: float = 60.0
    min_body_rate: float = 16 << 10  # bytes/s, after header_s of body

    def __post_init__(self) -> None:
        if min(self.header_s, self.idle_s, self.body_s) <= 0 or self.min_body_rate < 0:
            raise ValueError("timeouts must be positive")


class ConnectionTable:
    def __init__(self, max_total: int, max_per_client: int, timeouts: Timeouts) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.timeouts = timeouts
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, Conn] = {}
        self._per_client: Counter[str] = Counter()  # live (not killed) connections per address
        self._live = 0
        self.timed_out = 0
        self.evicted = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="llmtrace-collect-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    # -- admission ---------------------------------------------------------------------------------
    def admit(self, sock: socket.socket, client: str) -> Conn | None:
        """A slot for a new connection (closing a stalled one if that is what it takes), or None."""
        now = time.monotonic()
        with self._lock:
            victim = None
            if self._per_client[client] >= self.max_per_client:
                victim = self._stalled(now, client)
                if victim is None:
                    self.refused += 1
                    return None
            elif self._live >= self.max_total:
                victim = self._stalled(now, None)
                if victim is None:
                    self.refused += 1
                    return None
            if victim is not None:
                self.evicted += 1
                self._kill(victim)
            conn = Conn(sock, client, "new", now, now + self.timeouts.header_s)
            self._conns[sock] = conn
            self._per_client[client] += 1
            self._live += 1
            return conn

    def _stalled(self, now: float, client: str | None) -> Conn | None:
        """The best connection to close: stalled, unauthenticated first, from the busiest address, the
        least progress. Caller holds the lock."""
        best: tuple[object, ...] | None = None
        victim = None
        rate_floor = max(self.timeouts.min_body_rate, 64 << 10)
        for c in self._conns.values():
            if c.killed or c.state == "busy" or (client is not None and c.client != client):
                continue
            age = now - c.since
            if age < EVICT_GRACE_S:
                continue
            if c.state == "body" and c.body_bytes / age >= rate_floor:
                continue  # a body arriving at a fair rate is not stalled
            key = (c.authed, -self._per_client[c.client], c.body_bytes / age if c.state == "body" else 0.0,
                   c.since)
            if best is None or key < best:
                best, victim = key, c
        return victim

    def lookup(self, sock: socket.socket) -> Conn | None:
        with self._lock:
            return self._conns.get(sock)

    def release(self, conn: Conn) -> None:
        with self._lock:
            if self._conns.pop(conn.sock, None) is not None and not conn.killed:
                self._per_client[conn.client] -= 1
                self._live -= 1
                if self._per_client[conn.client] <= 0:
                    del self._per_client[conn.client]

    # -- state changes (from the connection's own thread) ---------------------------------------------
    def enter(self, conn: Conn, state: str) -> None:
        now = time.monotonic()
        t = self.timeouts
        conn.since = now
        conn.state = state
        conn.body_bytes = 0
        conn.deadline = (now + t.idle_s if state == "idle" else now + t.header_s if state in ("new", "headers")
                         else now + t.body_s if state == "body" else float("inf"))

    # -- the watchdog ------------------------------------------------------------------------------------
    def _watch(self) -> None:
        t = self.timeouts
        while not self._stop.wait(0.2):
            now = time.monotonic()
            with self._lock:
                for c in list(self._conns.values()):
                    if c.killed or c.state == "busy":
                        continue
                    slow = (c.state == "body" and now - c.since > t.header_s
                            and c.body_bytes / (now - c.since) < t.min_body_rate)
                    if now > c.deadline or slow:
                        self.timed_out += 1
                        self._kill(c)

    def _kill(self, c: Conn) -> None:
        """Stop reading from a connection (caller holds the lock): its thread's read returns at once; the
        thread answers 408 where it can and closes. Its slot is free from now on."""
        c.killed = True
        self._per_client[c.client] -= 1
        if self._per_client[c.client] <= 0:
            del self._per_client[c.client]
        self._live -= 1
        try:
            c.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"connections_open": self._live, "connections_timed_out": self.timed_out,
                    "connections_evicted": self.evicted, "connections_refused": self.refused}
