"""How ``llmtrace sql`` prints a result: DuckDB's own box renderer on a terminal, complete plain text when
piped, CSV, or JSON with JSON columns nested. Control characters are never written raw to a terminal."""

from __future__ import annotations

import csv
import json
import re
from typing import TextIO

import duckdb

from llmtrace.tracer.cli.console import CONTROL_RE2, jsonable, printable

BOX_ROWS = 10_000  # rows the box reads at most, as DuckDB's own renderer does
# Types whose text can never hold a control character: shown as they are, with their own type in the header.
_PLAIN_TYPES = frozenset({
    "boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint", "uinteger",
    "ubigint", "uhugeint", "float", "double", "decimal", "date", "time", "timestamp", "timestamp_s",
    "timestamp_ms", "timestamp_ns", "timestamp with time zone", "time with time zone", "interval", "uuid",
    "bignum", "varint",
})
# Characters json.dumps(ensure_ascii=False) leaves raw (it escapes only C0): DEL, C1, bidirectional overrides.
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _printable_sql(text: str) -> str:
    """:func:`printable` written in DuckDB's SQL over the expression ``text``: each code point that
    ``CONTROL_RE2`` matches becomes ``\\t``, ``\\n``, ``\\r``, ``\\xNN`` or ``\\uNNNN``, as printable does (the tests
    hold the two to the same output). SQL, not a Python UDF: DuckDB's UDFs of every kind need numpy, which
    the light core does not install."""
    code = "unicode(c)"
    escape = (f"CASE WHEN c = chr(9) THEN '\\t' WHEN c = chr(10) THEN '\\n' WHEN c = chr(13) THEN '\\r' "
              f"WHEN {code} < 256 THEN '\\x' || lpad(lower(to_hex({code})), 2, '0') "
              f"ELSE '\\u' || lpad(lower(to_hex({code})), 4, '0') END")
    # A list comprehension: the one lambda spelling DuckDB 1.1 (the oldest the core allows) and 2.x both read.
    return (f"array_to_string([CASE WHEN regexp_matches(c, '{CONTROL_RE2}') THEN {escape} ELSE c END "
            f"for c in string_split({text}, '')], '')")


def _escaped(rel: duckdb.DuckDBPyRelation, everything_as_text: bool = False) -> duckdb.DuckDBPyRelation:
    """The relation with every text-like column made printable, by position so duplicate names survive.
    The regexp test keeps the per-character rewrite off the rows that need nothing (nearly all of them)."""
    items = []
    for i, (name, typ) in enumerate(zip(rel.columns, rel.types, strict=True), start=1):
        alias = _quote(printable(name))
        if str(typ.id) in _PLAIN_TYPES and not everything_as_text:
            items.append(f"#{i} AS {alias}")
            continue
        text = f"CAST(#{i} AS VARCHAR)"
        items.append(f"CASE WHEN regexp_matches({text}, '{CONTROL_RE2}') THEN {_printable_sql(text)} ELSE {text} END AS {alias}")
    return rel.project(", ".join(items))


def box(conn: duckdb.DuckDBPyConnection, query: str, width: int, max_rows: int) -> str:
    """The result drawn by DuckDB's renderer (columns elided to fit ``width``, NULL as NULL) with a row count."""
    rel = conn.sql(query)
    if rel is None:
        return ""
    esc = _escaped(rel)
    held = esc.limit(BOX_ROWS + 1).materialize()  # one run of the query for both the box and the count
    count = len(held.fetchall())
    shown = held if count <= BOX_ROWS else esc  # more: DuckDB's renderer reads its own cap and says "? rows"
    text = _render(shown, width, max_rows)
    if count <= BOX_ROWS and not _has_footer(text):
        text += f"\n  {count} row{'' if count == 1 else 's'}"
    return text


def _render(rel: duckdb.DuckDBPyRelation, width: int, max_rows: int) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):  # show() prints; the renderer itself is DuckDB's
        rel.show(max_width=width, max_rows=max_rows, null_value="NULL")
    return buf.getvalue().rstrip("\n")


def _has_footer(text: str) -> bool:
    lines = text.split("\n")
    last_box = max((i for i, line in enumerate(lines) if line.startswith("└")), default=len(lines) - 1)
    return any(line.strip() for line in lines[last_box + 1:])


def explain(conn: duckdb.DuckDBPyConnection, query: str, out: TextIO) -> None:
    """EXPLAIN's plan as DuckDB's CLI prints it (the plan text, not a box around it), escaped line by line."""
    for row in conn.execute(query).fetchall():
        for line in str(row[-1]).rstrip("\n").split("\n"):
            out.write(printable(line) + "\n")


def plain(conn: duckdb.DuckDBPyConnection, query: str, out: TextIO) -> None:
    """Tab-separated, header first, every row and column, NULL as NULL, values as DuckDB casts them to text;
    tabs, newlines and control characters escaped so one line is always one row."""
    rel = conn.sql(query)
    if rel is None:
        return
    esc = _escaped(rel, everything_as_text=True)
    out.write("\t".join(printable(c) for c in rel.columns) + "\n")
    for row in esc.iter_rows():
        out.write("\t".join("NULL" if v is None else v for v in row) + "\n")


def csv_rows(conn: duckdb.DuckDBPyConnection, query: str, out: TextIO, escape: bool) -> None:
    """CSV with DuckDB's text for each value (NULL is an empty field); ``escape`` when it goes to a terminal."""
    rel = conn.sql(query)
    if rel is None:
        return
    shown = _escaped(rel, everything_as_text=True) if escape else rel.project(
        ", ".join(f"CAST(#{i} AS VARCHAR) AS {_quote(c)}" for i, c in enumerate(rel.columns, start=1)))
    w = csv.writer(out, lineterminator="\n")
    w.writerow([printable(c) if escape else c for c in rel.columns])
    for row in shown.iter_rows():
        w.writerow(row)


def json_rows(conn: duckdb.DuckDBPyConnection, query: str, out: TextIO) -> None:
    """A JSON array, one object per line; JSON columns (attributes, resource, events) nested as objects."""
    rel = conn.sql(query)
    if rel is None:
        return
    names = rel.columns
    is_json = [str(t) == "JSON" for t in rel.types]
    out.write("[")
    first = True
    for row in rel.iter_rows():
        obj = {n: (_parse_json(v) if j else jsonable(v)) for n, v, j in zip(names, row, is_json, strict=True)}
        text = json.dumps(obj, ensure_ascii=False, default=str)
        out.write(("\n  " if first else ",\n  ") + _JSON_RAW.sub(lambda m: f"\\u{ord(m[0]):04x}", text))
        first = False
    out.write("\n]\n" if not first else "]\n")


def _parse_json(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value  # not valid JSON after all: keep the text rather than fail the whole output
