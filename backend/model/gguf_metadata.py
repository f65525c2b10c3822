"""A GGUF file's metadata (its key-value section) read without parsing its tensors.

``gguf.GGUFReader`` builds a numpy view for every field and every tensor, ~1.8 s of CPU for the default
model; the tokenizer needs only a few metadata keys. This reads the key-value section straight from a
memory map, values as ``ReaderField.contents()`` gives them (strings decoded as UTF-8, arrays as lists), so
``llmtrace serve --model tiny`` (the default model's tokenizer over a tiny network) starts without it.

Little-endian GGUF v2 and v3; anything else raises ``ValueError`` and the caller falls back to GGUFReader.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

# GGUF value types -> struct format of one element (8: string, 9: array are read by hand)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf = buf
        self.pos = 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        start = self.pos
        self.pos += n
        return self.buf[start:self.pos].decode("utf-8")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            sub, count = self.unpack("I"), self.unpack("Q")
            if sub in _SCALARS:  # one unpack for the whole array
                fmt = _SCALARS[sub]
                out = list(struct.unpack_from(f"<{count}{fmt}", self.buf, self.pos))
                self.pos += count * struct.calcsize(fmt)
                return out
            return [self.value(sub) for _ in range(count)]
        raise ValueError(f"unknown GGUF value type {kind}")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """Every metadata key of the GGUF file at ``path`` and its value."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf)
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        cur.pos = 4
        version = cur.unpack("I")
        if version not in (2, 3):  # v1 used 32-bit counts; a byte-swapped (big-endian) file reads huge here
            raise ValueError(f"{path}: GGUF version {version} is not read here")
        cur.unpack("Q")  # tensor count
        kv_count = cur.unpack("Q")
        out: dict[str, Any] = {}
        for _ in range(kv_count):
            key = cur.string()
            out[key] = cur.value(cur.unpack("I"))
        return out
