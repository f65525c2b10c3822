"""Incremental server-sent-events parsing: bytes in as the app reads them, complete events out.

The parser only looks at the bytes; the app still receives every byte unchanged from the stream
wrapper. Only the unfinished tail of the last event is held, so memory stays bounded by the longest
single event, never by the stream.
"""

from __future__ import annotations

# One event: (event name or None, data payload as bytes; several data lines are joined by b"\n").
SSEEvent = tuple[bytes | None, bytes]

_MAX_PENDING_BYTES = 4 * 1024 * 1024  # an "event" larger than this is not SSE we understand; stop holding it


class SSEParser:
    """Feed raw byte chunks with ``feed``; get back the events they complete."""

    __slots__ = ("_buf", "_overflow")

    def __init__(self) -> None:
        self._buf = b""
        self._overflow = False

    @property
    def overflowed(self) -> bool:
        """True when an event grew past the hold limit and parsing stopped (the bytes still flow)."""
        return self._overflow

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._overflow or not chunk:
            return []
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # Line endings may be CRLF, LF or CR. A CR at the very end might be the first half of a CRLF
            # split across reads, so it waits for the next chunk.
            hold_cr = buf.endswith(b"\r")
            if hold_cr:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if hold_cr:
                buf += b"\r"
        blocks = buf.split(b"\n\n")
        tail = blocks.pop()
        if len(tail) > _MAX_PENDING_BYTES:
            self._overflow = True
            self._buf = b""
        else:
            self._buf = tail
        events: list[SSEEvent] = []
        for block in blocks:
            ev = _parse_block(block)
            if ev is not None:
                events.append(ev)
        return events

    def flush(self) -> list[SSEEvent]:
        """Events left when the stream ends without a final blank line."""
        tail, self._buf = self._buf.rstrip(b"\r"), b""
        if not tail or self._overflow:
            return []
        ev = _parse_block(tail)
        return [ev] if ev is not None else []


def _parse_block(block: bytes) -> SSEEvent | None:
    # Fast path: the common single-line "data: {...}" event.
    if block.startswith(b"data:") and b"\n" not in block:
        data = block[5:]
        return None, data[1:] if data.startswith(b" ") else data
    name: bytes | None = None
    data_lines: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue  # comments keep proxies from closing idle streams
        field, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data_lines.append(value)
        elif field == b"event":
            name = value
    if not data_lines and name is None:
        return None
    return name, b"\n".join(data_lines)
