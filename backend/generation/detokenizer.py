"""Incremental detokenization: token ids in, text out, one token at a time.

Byte-level BPE splits multi-byte characters (emoji, CJK) across tokens, so decoding each token on its own
yields U+FFFD mid-stream. We keep the raw bytes and emit only the longest prefix that is complete UTF-8;
the trailing partial character is held back until the next token completes it (or the stream ends).
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"

# The hold-back a detokenizer gets unless its request says otherwise: ``llmtrace serve
# --detokenizer-holdback off`` turns it off for the whole server, to reproduce a naive streaming decoder
# (each token decoded on its own), which shows U+FFFD wherever a character spans two tokens.
_default_hold_back = True


def set_default_hold_back(on: bool) -> None:
    global _default_hold_back
    _default_hold_back = bool(on)


def _incomplete_tail(buf: bytes) -> int:
    """How many trailing bytes of ``buf`` are the start of a UTF-8 character that is not complete yet."""
    # Look back at most 3 bytes for a lead byte whose sequence runs past the end.
    for back in range(1, min(4, len(buf)) + 1):
        b = buf[-back]
        if b & 0b1100_0000 == 0b1000_0000:  # continuation byte: keep looking for the lead
            continue
        if b & 0b1110_0000 == 0b1100_0000:
            need = 2
        elif b & 0b1111_0000 == 0b1110_0000:
            need = 3
        elif b & 0b1111_1000 == 0b1111_0000:
            need = 4
        else:
            return 0  # ASCII or an invalid lead: nothing to wait for
        return back if back < need else 0
    return 0


class IncrementalDetokenizer:
    """Turns a token stream into text deltas, holding back bytes until they form valid UTF-8."""

    __slots__ = ("_token_bytes", "_special_ids", "skip_special_tokens", "_pending", "held_back_max",
                 "replacement_chars", "hold_back")

    def __init__(
        self,
        token_bytes: Callable[[int], bytes],
        special_ids: frozenset[int] | set[int],
        *,
        skip_special_tokens: bool = True,
        hold_back: bool | None = None,
    ) -> None:
        self._token_bytes = token_bytes
        self._special_ids = special_ids
        self.skip_special_tokens = skip_special_tokens
        self._pending = b""
        self.held_back_max = 0  # most bytes ever held back at once
        self.replacement_chars = 0  # U+FFFD emitted because the bytes were invalid or cut (hold-back off)
        self.hold_back = _default_hold_back if hold_back is None else hold_back

    @property
    def held_back(self) -> int:
        return len(self._pending)

    def push(self, token_id: int) -> str:
        """Add one token; return the text that is now complete."""
        if token_id in self._special_ids and self.skip_special_tokens:
            return ""
        buf = self._pending + self._token_bytes(token_id)
        keep = _incomplete_tail(buf) if self.hold_back else 0
        ready, self._pending = (buf[:-keep], buf[-keep:]) if keep else (buf, b"")
        self.held_back_max = max(self.held_back_max, len(self._pending))
        return self._decode(ready)

    def flush(self) -> str:
        """End of stream: whatever is still held back is emitted (as U+FFFD if it never completed)."""
        ready, self._pending = self._pending, b""
        return self._decode(ready)

    def _decode(self, data: bytes) -> str:
        if not data:
            return ""
        text = data.decode("utf-8", errors="replace")
        if REPLACEMENT in text:
            # Count only replacements we introduced, not a literal U+FFFD the model chose to emit.
            self.replacement_chars += text.count(REPLACEMENT) - data.count(REPLACEMENT.encode("utf-8"))
        return text
