"""Usage on every streamed OpenAI-style call, without the app seeing any difference.

The OpenAI chat-completions (and legacy completions) stream reports usage only when the request asks for
it with ``stream_options.include_usage``; the SDKs do not ask by default, so most streamed calls would
record no tokens and no cost. The middleware adds the option to the request body and then takes back
out of the response what the option added:

- one extra event before ``[DONE]`` whose ``choices`` is empty and whose ``usage`` holds the counts;
- a ``"usage": null`` member in every other chunk.

The parser still reads the raw bytes (usage included); the app reads the stream re-framed on event
boundaries with those two additions removed, so the events it parses are byte for byte what the
provider would have sent without the option. Only the boundaries of the raw reads differ, which no
HTTP client promises anyway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orjson import dumps, loads

from llmtrace.tracer import health

# `"usage": null` as a JSON member, with the comma that joins it to its neighbour (before or after).
_NULL_USAGE = re.compile(rb'\s*,\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,\s*')


def wants_injection(body: Mapping[str, object]) -> bool:
    """True for a streamed request that did not ask for usage itself."""
    if body.get("stream") is not True:
        return False
    opts = body.get("stream_options")
    return not (isinstance(opts, Mapping) and opts.get("include_usage") is True)


def with_usage(body: Mapping[str, object]) -> dict[str, object]:
    """The body with ``stream_options.include_usage`` set."""
    opts = body.get("stream_options")
    return {**body, "stream_options": {**(opts if isinstance(opts, Mapping) else {}), "include_usage": True}}


def replace_body(request: Any, new_body: Mapping[str, object]) -> bool:
    """Rewrite ``request``'s JSON body; False if it cannot be done.

    Only a request whose body is held in memory (``ByteStream``, as every SDK builds it) is rewritten; a
    streamed upload is left alone."""
    stream: Any = getattr(request, "stream", None)  # an httpx ByteStream, rebuilt with the new bytes below
    if type(stream).__name__ != "ByteStream" or not hasattr(request, "_content"):
        return False
    content = dumps(new_body)
    request.stream = type(stream)(content)
    request._content = content
    request.headers["Content-Length"] = str(len(content))
    return True


class UsageStripper:
    """Re-frames a streamed body on event boundaries and removes what ``include_usage`` added."""

    __slots__ = ("_buf", "_sep", "dropped", "failed")

    def __init__(self) -> None:
        self._buf = b""
        self._sep: bytes | None = None  # b"\n\n" or b"\r\n\r\n", fixed by the first event boundary seen
        self.dropped = 0
        self.failed = False

    def feed(self, chunk: bytes) -> bytes:
        """The bytes the app may read now (possibly none yet). Never raises: on a fault of its own it hands
        back what it holds and passes everything after through unchanged."""
        if self.failed:
            return chunk
        try:
            return self._feed(chunk)
        except Exception as exc:
            self.failed = True
            health.count("adapter_error", message=f"usage chunk filter stopped: {type(exc).__name__}: {exc}")
            held, self._buf = self._buf, b""
            return held + chunk

    def _feed(self, chunk: bytes) -> bytes:
        buf = self._buf + chunk if self._buf else chunk
        sep = self._sep
        if sep is None:
            crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
            if crlf < 0 and lf < 0:
                self._buf = buf
                return b""
            sep = self._sep = b"\r\n\r\n" if crlf >= 0 and (lf < 0 or crlf < lf) else b"\n\n"
        end = buf.rfind(sep)
        if end < 0:
            self._buf = buf
            return b""
        end += len(sep)
        complete, self._buf = buf[:end], buf[end:]
        if b'"usage"' not in complete:
            return complete
        events = complete.split(sep)
        events.pop()  # the empty piece after the last separator
        out = [self._clean(ev) for ev in events]
        return b"".join(ev + sep for ev in out if ev is not None)

    def flush(self) -> bytes:
        """What is left when the stream ends (an event without its final blank line)."""
        tail, self._buf = self._buf, b""
        if not tail or b'"usage"' not in tail:
            return tail
        cleaned = self._clean(tail)
        return cleaned if cleaned is not None else b""

    def _clean(self, event: bytes) -> bytes | None:
        if b'"usage"' not in event:
            return event
        if b'"choices"' in event and self._usage_only(event):
            self.dropped += 1
            return None
        return _NULL_USAGE.sub(b"", event)

    @staticmethod
    def _usage_only(event: bytes) -> bool:
        for line in event.splitlines():
            if line.startswith(b"data:"):
                try:
                    msg = loads(line[5:])
                except ValueError:
                    return False
                return isinstance(msg, dict) and msg.get("choices") == [] and isinstance(msg.get("usage"), dict)
        return False
