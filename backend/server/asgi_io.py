"""Small ASGI helpers: reading a bounded body, sending whole responses, noticing a client that left,
and telling a fresh connection from a reused keep-alive one."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from llmtrace.backend.server.errors import APIError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ClientGone(Exception):
    """The client closed the connection before we were done with it."""


async def read_body(receive: Receive, limit: int, timeout_s: float | None = None) -> bytes:
    """The whole body, at most ``limit`` bytes (413 past it), within ``timeout_s`` (408 past it: a client
    trickling its body holds a connection and the body's buffer for as long as it likes otherwise)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(receive, limit)
    except TimeoutError:
        raise APIError(408, f"the request body was not received within {timeout_s:g}s") from None


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        more = message.get("more_body", False)
        if size > limit:
            # Read (and drop) the rest first, up to a bound, so the client gets to see the 413 instead of
            # a reset connection while it is still sending.
            if more and size <= 4 * limit:
                chunks = []
                continue
            raise APIError(413, f"request body is larger than the {limit // (1 << 20)} MiB limit")
        chunks.append(chunk)
        if not more:
            return b"".join(chunks)


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client disconnects (the request body has already been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def send_bytes(send: Send, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_json(send: Send, status: int, payload: Any, headers: list[tuple[str, str]]) -> None:
    await send_bytes(send, status, orjson.dumps(payload),
                     [("content-type", "application/json"), *headers])


def header(scope: Scope, name: str) -> str | None:
    key = name.lower().encode("latin-1")
    for k, v in scope.get("headers", ()):
        if k == key:
            return str(v.decode("latin-1"))
    return None


# The scope key saying which request on its connection this is (1: the connection is new). ASGI gives the app no
# connection object, and a client's (host, port) names a connection only while it is open: on loopback a closed
# ephemeral port comes back within seconds, and a new connection read as a kept-alive one.
REQUEST_ON_CONNECTION = "llmtrace_request_on_connection"  # a scope key, not a span value: no dotted name


class ConnectionTracker:
    """Tells a kept-alive connection's later requests from a new connection's first: exactly where the serving
    protocol numbers each connection's requests in the scope (``http_guard.REQUEST_ON_CONNECTION``); otherwise by
    the client's (host, port) pair seen before, which misreads a new connection on a recycled port as reused
    (ASGI gives no connection object)."""

    def __init__(self, capacity: int = 8192) -> None:
        self._seen: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._capacity = capacity
        self.reused_total = 0
        self.opened_total = 0

    def note(self, scope: Scope) -> bool:
        numbered = scope.get(REQUEST_ON_CONNECTION)  # our protocol numbers each connection's requests: exact
        if isinstance(numbered, int):
            reused = numbered > 1
            self.reused_total += reused
            self.opened_total += not reused
            return reused
        client = scope.get("client")
        if not client:
            return False
        key = (str(client[0]), int(client[1]))
        count = self._seen.pop(key, 0)
        self._seen[key] = count + 1
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        if count:
            self.reused_total += 1
        else:
            self.opened_total += 1
        return count > 0
