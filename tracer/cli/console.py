"""Printing for the CLI: rich tables on a terminal, plain text when piped, JSON/CSV for machines."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import re
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

# C0 controls, DEL, C1 controls (U+009B is CSI on many terminals) and the bidirectional overrides that
# reorder what a terminal shows: any OTLP sender can put these in a span name, so they are never written raw.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# The same class in RE2 syntax, for DuckDB's regexp functions (no raw control characters in SQL text).
CONTROL_RE2 = r"[\x00-\x1f\x7f-\x9f\x{061c}\x{200e}\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}]"
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (ESC as ``\\x1b``, newline as ``\\n``),
    so a value can never move the cursor, retitle the window or hide text when printed to a terminal."""
    return _CONTROL.sub(_escape, text)


def console() -> Console:
    return Console(soft_wrap=False)


def jsonable(value: object) -> object:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[object]], fmt: str = "table", title: str | None = None) -> None:
    if fmt == "json":
        out = [{c: jsonable(v) for c, v in zip(columns, row)} for row in rows]
        sys.stdout.write(json.dumps(out, indent=2, default=str, ensure_ascii=False) + "\n")
        return
    if fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[jsonable(v) for v in row] for row in rows])
        return
    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(printable(col), overflow="fold")
    for row in rows:
        table.add_row(*["NULL" if v is None else printable(str(jsonable(v))) for v in row])
    c = console()
    c.print(table)
    c.print(f"[dim]{len(rows)} row{'s' if len(rows) != 1 else ''}[/dim]")
