"""``--since`` values shared by every read command (sql, diagnose, check, explore).

A value is either a duration back from now (``30m``, ``2h``, ``7d``, ``1h30m``, ``2w``) or a point in time
(``2026-11-30``, ``2026-11-30T10:00``, ``2026-11-30 10:00:00+01:00``). Times without an offset are UTC,
because that is how the store's ``ts`` columns print (``make_timestamp`` of nanoseconds since the epoch).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_WHOLE_DURATION = re.compile(r"(?:\s*\d+(?:\.\d+)?\s*[smhdw])+\s*")


def parse_since(text: str, now_ns: int | None = None) -> int:
    """The start of the window as nanoseconds since the epoch; ValueError with a readable message otherwise."""
    value = text.strip().lower()
    now = time.time_ns() if now_ns is None else now_ns
    if value and _WHOLE_DURATION.fullmatch(value):
        seconds = sum(float(n) * _UNITS_S[u] for n, u in _DURATION.findall(value))
        return now - int(seconds * 1e9)
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read --since {text!r}: use a duration such as 30m, 2h, 7d (1h30m works too) "
            "or an ISO date/time such as 2026-11-30 or 2026-11-30T10:00 (UTC unless it has an offset)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def since_arg(text: str) -> int:
    """``type=`` for argparse: the same parse, reported as argparse's own usage error."""
    try:
        return parse_since(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
