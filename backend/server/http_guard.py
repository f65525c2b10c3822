"""Time and size limits on HTTP connections, which uvicorn leaves open: a client that opens a connection and
sends nothing, or sends its request headers a byte at a time (slowloris), holds a socket and a file
descriptor forever; a hundred of them starve the server. uvicorn's own ``timeout_keep_alive`` only covers
the idle time after a response.

``guarded_protocol`` makes uvicorn's httptools protocol close a connection whose request headers are not
complete ``header_timeout_s`` after the connection opened (or after the next request's first byte), and
refuse headers past ``max_header_bytes`` with a 400 (and a close). The body deadline is applied where the body is read
(``asgi_io.read_body``), so the client gets a 408 in its API's error shape.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmtrace.backend.server.asgi_io import REQUEST_ON_CONNECTION

log = logging.getLogger("llmtrace.serve")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0  # request line and headers, from the connection's (or request's) first byte
    body_timeout_s: float = 60.0  # the whole request body, from the end of the headers
    max_header_bytes: int = 64 << 10
    limit_concurrency: int = 1024  # connections plus running requests; past it new requests get 503

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_header_bytes < 1024:
            raise ValueError(f"max_header_bytes must be >= 1024, got {self.max_header_bytes}")
        if self.limit_concurrency < 1:
            raise ValueError(f"limit_concurrency must be >= 1, got {self.limit_concurrency}")


class _HeaderGuard(HttpToolsProtocol):
    limits = ConnectionLimits()
    closed_stalled = 0  # connections closed for sending no complete headers in time (all instances)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's own signature
        self._guard_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._requests = 0  # requests begun on this connection (the scope says which one each is)
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._requests += 1
        self.scope[REQUEST_ON_CONNECTION] = self._requests  # type: ignore[literal-required]  # our own scope key
        self._header_bytes = 0
        if self._guard_timer is None:  # the next request on a kept-alive connection started
            self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.limits.max_header_bytes:
            # Raised inside the parser's callback: httptools turns it into a parser error, which uvicorn
            # answers with 400 and a close; the headers kept so far are dropped with the connection.
            raise _HeadersTooLarge(f"request headers are larger than {self.limits.max_header_bytes} bytes")

    def _arm(self) -> None:
        self._disarm()
        self._guard_timer = self.loop.call_later(self.limits.header_timeout_s, self._headers_timed_out)

    def _disarm(self) -> None:
        if self._guard_timer is not None:
            self._guard_timer.cancel()
            self._guard_timer = None

    def _headers_timed_out(self) -> None:
        self._guard_timer = None
        if self.transport is not None and not self.transport.is_closing():
            type(self).closed_stalled += 1
            log.info("closing a connection from %s: no complete request headers in %.0fs", self.client,
                     self.limits.header_timeout_s)
            self.transport.close()


class _HeadersTooLarge(Exception):
    pass


def guarded_protocol(limits: ConnectionLimits) -> type[Any]:
    """uvicorn's httptools protocol with ``limits`` (pass as ``uvicorn.Config(http=...)``)."""
    return type("GuardedHttpToolsProtocol", (_HeaderGuard,), {"limits": limits})
