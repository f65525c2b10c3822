"""``llmtrace deploy mark NAME [--note]``: annotate the store with a deploy, for hit-rate-by-deploy views."""

from __future__ import annotations

import argparse
import sys

from llmtrace.tracer.settings import resolve_db
from llmtrace.tracer.storage.store import StoreError, mark_deploy, read_connection


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="deploy_command", required=True, metavar="ACTION")
    mark = sub.add_parser("mark", help="record that a deploy happened now")
    mark.add_argument("name", help="deploy name, e.g. a version or git sha (the service.version of its spans)")
    mark.add_argument("--note", help="free text shown beside the marker")
    mark.add_argument("--service", help="service the deploy belongs to")
    mark.add_argument("--db", help="store file (default: $LLMTRACE_DB or ./llmtrace.duckdb)")


def run(args: argparse.Namespace) -> int:
    path = resolve_db(args.db)
    try:
        # The store must be there and be a store: marking a typo'd path would make a new store the deploy is
        # lost in, and marking someone else's DuckDB file would write llmtrace's schema into it.
        with read_connection(path):
            pass
        mark_deploy(path, args.name, args.note, args.service)
    except StoreError as exc:
        print(f"llmtrace deploy: {exc}", file=sys.stderr)
        return 1
    print(f"marked deploy {args.name} in {path}")
    return 0
