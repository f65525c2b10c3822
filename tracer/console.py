"""Printing for the CLI: rich tables on a terminal, plain text when piped, JSON/CSV for machines."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table


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
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*["" if v is None else str(jsonable(v)) for v in row])
    c = console()
    c.print(table)
    c.print(f"[dim]{len(rows)} row{'s' if len(rows) != 1 else ''}[/dim]")
