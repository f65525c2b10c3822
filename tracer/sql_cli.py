"""``llmtrace sql``: read-only SQL over the store (or a Parquet export), printed as a table, JSON or CSV."""

from __future__ import annotations

import argparse
import re
import sys

import duckdb

from .console import print_rows
from .store import StoreError, read_store

_WRITE = re.compile(
    r"^\s*(insert|update|delete|drop|create|alter|attach|detach|copy|export|import|install|load|pragma|set|"
    r"checkpoint|vacuum|call|truncate|replace|merge|grant|begin|commit)\b",
    re.IGNORECASE,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="a SELECT (or WITH ... SELECT) over spans, stages, requests, traces, deploys")
    parser.add_argument("--db", help="store file (default: $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--parquet", metavar="GLOB", help="query a Parquet export instead, e.g. 'out/**/*.parquet'")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print rows as JSON")
    fmt.add_argument("--csv", action="store_true", help="print rows as CSV")


def is_write(query: str) -> bool:
    return any(_WRITE.match(part) for part in query.split(";") if part.strip())


def run(args: argparse.Namespace) -> int:
    if is_write(args.query):
        print("llmtrace sql: only read queries are allowed (the store is opened read-only); "
              "use `llmtrace deploy mark` to annotate deploys", file=sys.stderr)
        return 2
    fmt = "json" if args.json else "csv" if args.csv else "table"
    try:
        with read_store(args.db, args.parquet) as conn:
            return _query(conn, args.query, fmt)
    except StoreError as exc:
        print(f"llmtrace sql: {exc}", file=sys.stderr)
        return 1


def _query(conn: duckdb.DuckDBPyConnection, query: str, fmt: str) -> int:
    try:
        rel = conn.execute(query)
    except duckdb.Error as exc:
        msg = str(exc).splitlines()[0]
        if "read-only" in msg.lower():
            msg = "only read queries are allowed (the store is opened read-only)"
        print(f"llmtrace sql: {msg}", file=sys.stderr)
        return 2
    if rel.description is None:
        return 0
    columns = [d[0] for d in rel.description]
    print_rows(columns, rel.fetchall(), fmt)
    return 0
