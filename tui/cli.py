"""``llmtrace explore [DB]``: open the terminal UI over a store (read-only; never blocks a writer), or over a
ClickHouse store (``--store clickhouse://HOST:8123/DB``, ``chdb://PATH``, or ``$LLMTRACE_STORE``)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from llmtrace.tracer.settings import env, resolve_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("db", nargs="?", default=None,
                        help="store to open (default: --db, $LLMTRACE_DB, or ./llmtrace.duckdb)")
    parser.add_argument("--db", dest="db_option", default=None, help="store to open (same as the positional DB)")
    parser.add_argument("--store", metavar="URL", default=None, help="ClickHouse: clickhouse://HOST:8123/DB or "
                        "chdb://PATH (default: $LLMTRACE_STORE when no DB is given; docs/scale.md)")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="live mode: show new passes as an app or the demo writes the store")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between live-mode polls (default 1)")
    parser.add_argument("--filter", default="", help="start with this request filter, e.g. 'ttft>2s deploy=v2'")
    parser.add_argument("--service", default=None, help="only this service's passes (the filter term service=NAME)")
    parser.add_argument("--since", default=None,
                        help="only passes from this window: 30m, 2h, 7d or an ISO date (the filter term since=...)")


def run(args: argparse.Namespace) -> int:
    from llmtrace.tracer.storage.store import StoreError, is_clickhouse_url
    from llmtrace.tui.data.store_reader import StoreReader

    named = args.db or args.db_option
    store = args.store or (env("LLMTRACE_STORE") if not named else None)
    path: Path | str = str(store) if is_clickhouse_url(store) else resolve_db(named or store)
    initial = initial_filter(args)
    if initial is None:
        return 2
    if args.interval <= 0:
        print("llmtrace explore: --interval must be positive", file=sys.stderr)
        return 2
    if not args.follow or not isinstance(path, Path) or path.exists():
        # A missing or corrupt store is a sentence, not a traceback. In live mode a missing file is
        # fine: the app waits for the writer to create it.
        reader = StoreReader(path)
        try:
            reader.check()
        except StoreError as exc:
            print(f"llmtrace explore: {exc}", file=sys.stderr)
            return 2
        finally:
            reader.close()
    from llmtrace.tui.app import ExplorerApp

    ExplorerApp(path, follow=args.follow, poll_s=args.interval, initial_filter=initial).run()
    return 0


def initial_filter(args: argparse.Namespace) -> str | None:
    """--filter, --service and --since as one filter text (the box shows it, esc-esc clears it); None after
    printing why when it does not compile."""
    from llmtrace.tui.data.filter_expr import FilterError, compile_filter

    terms = [args.filter] if args.filter else []
    if args.service:
        terms.append(shlex.quote(f"service={args.service}"))
    if args.since:
        terms.append(shlex.quote(f"since={args.since}"))
    text = " ".join(terms)
    try:
        compile_filter(text)
    except FilterError as exc:
        print(f"llmtrace explore: {exc}", file=sys.stderr)
        return None
    return text
