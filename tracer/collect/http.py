"""``llmtrace collect``'s HTTP odds and ends: OTLP response bodies (partial success, google.rpc.Status) and
the lingering close that lets a client read an error sent before its body was read."""

from __future__ import annotations

import json
import socket
import time


def drain(sock: socket.socket, max_bytes: int = 1 << 20, max_s: float = 0.5) -> None:
    """Lingering close: stop sending, then read and drop what the client still sends for a moment.
    Closing a socket with unread input makes the kernel send a reset, which can destroy the error
    response before the client reads it."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(0.2)
        deadline = time.monotonic() + max_s
        got = 0
        while got < max_bytes and time.monotonic() < deadline:
            data = sock.recv(1 << 16)
            if not data:
                return
            got += len(data)
    except OSError:
        pass


def framing_error(content_lengths: list[str], transfer_encoding: str | None) -> str | None:
    """Why a request's body has no single end, or None. Two Content-Length headers, or one beside
    Transfer-Encoding, let a proxy in front and this server split the stream in different places (request
    smuggling); RFC 9112 section 6.3 lets a server refuse both, and uvicorn's parser under ``llmtrace serve``
    does."""
    if len(content_lengths) > 1:
        shown = ", ".join(repr(v[:20]) for v in content_lengths[:4])
        return f"{len(content_lengths)} Content-Length headers ({shown}); send one"
    if content_lengths and transfer_encoding is not None:
        return "both Content-Length and Transfer-Encoding; send one"
    return None


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def status_proto(code: int, message: str) -> bytes:
    """A google.rpc.Status (code = 1, message = 2), the error body OTLP/HTTP asks for."""
    grpc_code = {400: 3, 401: 16, 404: 5, 405: 12, 408: 4, 411: 3, 413: 8, 429: 8, 503: 14}.get(code, 2)
    msg = message.encode()
    return b"\x08" + _varint(grpc_code) + b"\x12" + _varint(len(msg)) + msg


def export_response(rejected: int, reason: str | None, as_json: bool) -> tuple[bytes, str]:
    """OTLP partial success: rejected spans, or only a warning (dropped values) with rejected_spans 0."""
    if as_json:
        doc: dict[str, object] = {}
        if rejected or reason:
            doc["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": reason or ""}
        return json.dumps(doc).encode(), "application/json"
    if not rejected and not reason:
        return b"", "application/x-protobuf"
    msg = (reason or "").encode()
    inner = b"\x08" + _varint(rejected) + b"\x12" + _varint(len(msg)) + msg
    return b"\x0a" + _varint(len(inner)) + inner, "application/x-protobuf"
