"""Digests of a tool call's arguments and result: what tells a loop (the same call again, or calls that get
nowhere) from fan-out (one tool over distinct arguments), without keeping a word of either.

Both the middleware (``adapters/helpers/loops.py``) and the collector (foreign ``execute_tool`` spans) write them
through these two functions, so a call recorded either way digests alike. The form hashed is loose on
purpose: JSON is parsed and its keys sorted, and each string is reduced to its words, case-folded and in
sorted order, so ``{"q": "Paris weather"}`` and ``{"q":"weather  paris"}`` are the same call; a different
order id, page or date is not. The digest is the store's keyed hash (``capture.hash_text``); with capture
``none`` nothing is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from llmtrace.tracer.record import capture

_WORD = re.compile(r"\w+")
_MAX_CHARS = 64 * 1024  # a result larger than this is digested from its first 64 KiB (a flooding result)


def _loose(value: object) -> object:
    """The value in the form two near-same calls share (see the module doc)."""
    if isinstance(value, Mapping):
        return {str(k): _loose(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_loose(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (int, float)):
        return value
    return " ".join(sorted(_WORD.findall(str(value).casefold())))


def _parsed(value: object) -> object:
    """A JSON string as the object it holds (tool arguments travel as JSON text), else the value."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()[:_MAX_CHARS]
        if text[:1] in ("{", "[", '"'):
            try:
                return json.loads(text)
            except ValueError:
                return text
        return text
    return value


def digest(value: object) -> str | None:
    """The keyed digest of ``value``'s loose form, or None when capture is ``none`` or there is no value."""
    if value is None or capture.mode() == "none":
        return None
    try:
        canonical = json.dumps(_loose(_parsed(value)), sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):  # a value json cannot walk (a cycle): its text, loosened
        canonical = str(_loose(str(value)))
    return capture.hash_text(canonical)


def arguments_digest(arguments: object) -> str | None:
    """The digest of a call's arguments (a mapping, or their JSON text)."""
    return digest(arguments)


def result_digest(result: object = None, error: str | None = None) -> str | None:
    """The digest of what a call gave back: its result, or, when it raised, its error (type and message), so
    the same error again is the same digest and never equals a result's."""
    if error is not None:
        return digest({"error": error})
    return digest(result)
