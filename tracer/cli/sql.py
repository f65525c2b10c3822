"""``llmtrace sql``: read-only SQL over the store (or a Parquet export).

On a terminal the result is drawn by DuckDB's own renderer; piped, it is plain tab-separated text, complete;
``--csv`` and ``--json`` are for machines. Without a query on a terminal it opens a small shell with history.
Read-only is enforced by DuckDB (statement types from its parser, a locked read-only connection), see
``tracer.sql_guard``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import TextIO

import duckdb

from llmtrace.tracer.cli import sql_output
from llmtrace.tracer.cli.console import printable
from llmtrace.tracer.cli.timewindow import since_arg
from llmtrace.tracer.storage.sql_guard import NotReadOnly, Statement, check_read_only
from llmtrace.tracer.storage.store import SpanFilter, StoreError, read_store

PROG = "llmtrace sql"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", nargs="?",
                        help="a SELECT (or WITH ... SELECT, EXPLAIN SELECT) over spans, stages, requests, traces, "
                             "deploys; without one: read it from stdin, or open a shell on a terminal")
    parser.add_argument("--db", help="store file (default: $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--parquet", metavar="GLOB", help="query a Parquet export instead, e.g. 'out/**/*.parquet'")
    parser.add_argument("--store", metavar="URL", help="ClickHouse: clickhouse://HOST:8123/DB or chdb://PATH "
                                                       "(default: $LLMTRACE_STORE; docs/scale.md)")
    parser.add_argument("--service", help="only this service's spans (every view follows)")
    parser.add_argument("--since", type=since_arg, metavar="WHEN",
                        help="only spans that started since WHEN: 30m, 2h, 7d, or an ISO date/time (UTC)")
    parser.add_argument("--max-rows", type=int, default=40, metavar="N",
                        help="rows the terminal table shows (DuckDB elides the middle; default 40)")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print rows as a JSON array (JSON columns nested)")
    fmt.add_argument("--csv", action="store_true", help="print rows as CSV")


def run(args: argparse.Namespace) -> int:
    try:
        if args.query is None:
            if sys.stdin.isatty():
                from llmtrace.tracer.cli.sql_shell import shell

                return shell(lambda text: run_query(args, text, sys.stdout, interactive=True))
            return run_query(args, sys.stdin.read(), sys.stdout)
        return run_query(args, args.query, sys.stdout)
    except BrokenPipeError:
        # `llmtrace sql --csv ... | head`: the reader has all it wanted. Stop quietly, as `cat` would, and keep
        # Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _error(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def run_query(args: argparse.Namespace, query: str, out: TextIO, interactive: bool = False) -> int:
    try:
        statements = check_read_only(query)
    except NotReadOnly as exc:
        _error(f"refused: {exc} (only read queries are allowed)")
        return 2
    except duckdb.Error as exc:
        _error(printable_error(exc))
        return 2
    span_filter = SpanFilter(service=args.service, since_ns=args.since)
    try:
        with read_store(args.db, args.parquet, span_filter=span_filter, locked=True,
                        store=getattr(args, "store", None), env_store=True) as conn:
            local_result = getattr(conn, "local_result", None)  # --store ClickHouse: run there, print a local copy
            for st in statements:
                run_on, st_here = conn, st
                if local_result is not None:
                    run_on, text = local_result(st.text)
                    st_here = Statement(text, st.explain)
                code = _one(run_on, st_here, args, out, interactive)
                if code:
                    return code
    except StoreError as exc:
        _error(str(exc))
        return 1
    return 0


def printable_error(exc: Exception) -> str:
    """DuckDB's message whole (its "Candidate bindings" hints are the useful part), never a raw escape."""
    return "\n".join(printable(line) for line in str(exc).strip().split("\n"))


def _one(conn: duckdb.DuckDBPyConnection, st: Statement, args: argparse.Namespace, out: TextIO,
         interactive: bool) -> int:
    try:
        if st.explain:
            sql_output.explain(conn, st.text, out)
        elif args.json:
            sql_output.json_rows(conn, st.text, out)
        elif args.csv:
            sql_output.csv_rows(conn, st.text, out, escape=_is_tty(out))
        elif interactive or _is_tty(out):
            width = shutil.get_terminal_size((120, 40)).columns
            out.write(sql_output.box(conn, st.text, width, args.max_rows) + "\n")
        else:
            sql_output.plain(conn, st.text, out)
        out.flush()
    except duckdb.PermissionException as exc:
        _error(f"refused: {printable_error(exc)} (llmtrace sql reads only the store and the --parquet files)")
        return 2
    except duckdb.CatalogException as exc:
        first = str(exc).strip().split("\n")[0]
        if "extension" in first and "INSTALL" in str(exc):
            # DuckDB suggests INSTALL/LOAD/SET, none of which a read-only session may run: say so instead.
            _error(f"refused: {printable(first)} (llmtrace sql loads no extensions)")
        else:
            _error(printable_error(exc))
        return 2
    except duckdb.Error as exc:
        _error(printable_error(exc))
        return 2
    return 0


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def history_path() -> Path:
    """Where the shell keeps its history: $XDG_CACHE_HOME/llmtrace (or ~/.cache/llmtrace)/sql_history."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmtrace" / "sql_history"
