"""Spotting fields in a prompt that change from call to call (timestamps, dates, UUIDs, counters, ids).

One early volatile field makes every cached prefix block after it a miss, so what matters is the
*first* one: its character offset and what it looks like.
"""

from __future__ import annotations

import re

# Alternatives are tried left to right at each position, so the more specific shapes come first
# (a timestamp before the date inside it, a UUID before the hex run inside it).
_VOLATILE = re.compile(
    r"(?P<timestamp>\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{1,2}:\d{2}:\d{2}\b"
    r"|\b1[5-9]\d{8}(?:\d{3})?\b)"
    r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<date>\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?\s+(?:\d{1,2}\s+)?"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}(?:,?\s+\d{4})?"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2},\s+\d{4}\b"
    r"|\b\d{1,2}\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\s+\d{4}\b)"
    # For labelled fields only the value is in the group: the label itself does not move between calls.
    r"|\b(?:req|request|trace|span|session|msg|call|run)[_-]?(?:id)?[_:=\s-]+"
    r"(?P<request_id>[A-Za-z0-9_-]*\d[A-Za-z0-9_-]{5,})"
    r"|(?P<hex_id>\b[0-9a-f]{16,}\b)"
    r"|\b(?:turn|step|attempt|iteration|count|counter|request|call|message|visit)s?\s*"
    r"(?:#|no\.?|number)?\s*[:=#]?\s*(?P<counter>\d+)\b"
    r"|#(?P<hash_counter>\d+)\b",
    re.IGNORECASE,
)

KINDS = ("timestamp", "uuid", "date", "request_id", "counter")
_ALIASES = {"hex_id": "request_id", "hash_counter": "counter"}
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _field(m: re.Match[str]) -> tuple[int, int, str]:
    group = str(m.lastgroup)
    kind = _ALIASES.get(group, group)
    value = m.group(group)
    if kind == "request_id" and _UUID.fullmatch(value):
        kind = "uuid"
    return m.start(group), m.end(group), kind


def first_volatile(text: str) -> tuple[int, str | None]:
    """(offset, kind) of the first volatile-looking field, or (-1, None)."""
    m = _VOLATILE.search(text)
    if m is None:
        return -1, None
    start, _, kind = _field(m)
    return start, kind


def first_difference(a: str, b: str) -> int:
    """Offset of the first character where two texts differ (-1 when equal)."""
    if a == b:
        return -1
    n = min(len(a), len(b))
    # Compare in blocks first: long shared prefixes are the common case.
    i = 0
    step = 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def kind_at(text: str, offset: int) -> str:
    """The volatile kind of the field covering ``offset`` (``changed`` when no pattern covers it)."""
    for m in _VOLATILE.finditer(text):
        start, end, kind = _field(m)
        if start <= offset < max(end, start + 1):
            return kind
        if start > offset:
            break
    return "changed"
