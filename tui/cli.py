"""``llmtrace explore [DB]``: open the terminal UI over a store (read-only; never blocks a writer)."""

from __future__ import annotations

import argparse
import sys

from llmtrace.tracer.settings import resolve_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("db", nargs="?", default=None,
                        help="store to open (default: --db, $LLMTRACE_DB, or ./llmtrace.duckdb)")
    parser.add_argument("--db", dest="db_option", default=None, help="store to open (same as the positional DB)")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="live mode: show new passes as an app or the demo writes the store")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between live-mode polls (default 1)")
    parser.add_argument("--filter", default="", help="start with this request filter, e.g. 'ttft>2s deploy=v2'")


def run(args: argparse.Namespace) -> int:
    from llmtrace.tracer.store import StoreError

    from .data.store_reader import StoreReader

    path = resolve_db(args.db or args.db_option)
    if args.interval <= 0:
        print("llmtrace explore: --interval must be positive", file=sys.stderr)
        return 2
    if not args.follow or path.exists():
        # A missing or corrupt store is a sentence, not a traceback. In live mode a missing file is
        # fine: the app waits for the writer to create it.
        try:
            StoreReader(path).check()
        except StoreError as exc:
            print(f"llmtrace explore: {exc}", file=sys.stderr)
            return 2
    from .app import ExplorerApp

    ExplorerApp(path, follow=args.follow, poll_s=args.interval, initial_filter=args.filter).run()
    return 0
