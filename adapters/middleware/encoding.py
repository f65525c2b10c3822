"""Reading compressed responses without touching the app's copy.

The transport sees the raw bytes, before the HTTP client undoes ``Content-Encoding``. Providers compress
JSON answers (and proxies sometimes streams), so the parser gets its own incremental decoder; the app's
bytes are left exactly as they came. An encoding we cannot decode is reported, not guessed at.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

Decoder = Callable[[bytes], bytes]


class _Deflate:
    """``deflate`` is meant to be zlib-wrapped but servers also send raw deflate; try one, then the other."""

    __slots__ = ("_obj", "_first")

    def __init__(self) -> None:
        self._obj = zlib.decompressobj()
        self._first = True

    def __call__(self, data: bytes) -> bytes:
        if self._first:
            self._first = False
            try:
                return self._obj.decompress(data)
            except zlib.error:
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._obj.decompress(data)


def _one(name: str) -> Decoder | None:
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if name == "deflate":
        return _Deflate()
    if name == "br":
        try:
            import brotli  # optional, as in httpx
        except ImportError:
            return None
        return brotli.Decompressor().process
    if name == "zstd":
        try:
            import zstandard  # optional, as in httpx
        except ImportError:
            return None
        return zstandard.ZstdDecompressor().decompressobj().decompress
    return None


def decoder_for(content_encoding: str) -> Decoder | None:
    """A decoder for the header's encodings (applied last to first), or None when one is unknown.

    Call only for a header naming some encoding other than ``identity``.
    """
    names = [n.strip().lower() for n in content_encoding.split(",") if n.strip() and n.strip() != "identity"]
    steps: list[Decoder] = []
    for name in reversed(names):
        d = _one(name)
        if d is None:
            return None
        steps.append(d)
    if len(steps) == 1:
        return steps[0]

    def chain(data: bytes) -> bytes:
        for step in steps:
            data = step(data)
        return data

    return chain
