"""``llmtrace report``: write the HTML report of a store (or a Parquet export).

    llmtrace report -o report.html
    llmtrace report --db traces.duckdb --since 7d --service support-agent -o report.html
    llmtrace report --parquet 'export/**/*.parquet' -o fleet.html
    llmtrace report --store clickhouse://clickhouse:8123/otel -o fleet.html

Exit status: 0 written, 2 it could not be (no store, bad --since, the charting extra missing).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from llmtrace.tracer.settings import env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="store file (default: $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--parquet", metavar="GLOB", help="report on a Parquet export instead")
    parser.add_argument("--store", metavar="URL", help="ClickHouse: clickhouse://HOST:8123/DB or chdb://PATH "
                                                       "(default: $LLMTRACE_STORE; docs/scale.md)")
    parser.add_argument("--since", help="only spans from the last 30m / 2h / 7d (or after a ns timestamp)")
    parser.add_argument("--service", metavar="NAME", help="only traces that touched this service")
    parser.add_argument("-o", "--output", metavar="FILE", default="report.html", help="where to write (default report.html)")
    parser.add_argument("--max-traces", type=int, default=8, help="trace pages to include (default 8)")


def run(args: argparse.Namespace) -> int:
    from llmtrace.analyzers.diagnose.diagnose_cli import parse_since
    from llmtrace.report.build import Options, build_report
    from llmtrace.report.charts import ChartsUnavailable
    from llmtrace.report.data import Selection
    from llmtrace.tracer.storage.store import StoreError, read_store

    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"llmtrace report: {exc}", file=sys.stderr)
        return 2
    if args.max_traces < 0:
        print("llmtrace report: --max-traces must be >= 0", file=sys.stderr)
        return 2
    out = Path(args.output)
    if not out.parent.exists():
        print(f"llmtrace report: directory {out.parent} does not exist", file=sys.stderr)
        return 2
    t = time.perf_counter()
    try:
        with read_store(args.db, args.parquet, store=args.store, env_store=True) as conn:
            source = args.store or args.parquet or str(args.db or "") or (env("LLMTRACE_STORE") or "")
            report = build_report(conn, Options(selection=Selection(since, args.service), max_traces=args.max_traces,
                                                source=source))
    except ChartsUnavailable as exc:
        print(f"llmtrace report: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"llmtrace report: {exc}", file=sys.stderr)
        return 2
    out.write_text(report.html, encoding="utf-8")
    print(f"llmtrace report: wrote {out} ({len(report.html.encode()) / 1e6:.2f} MB, {len(report.findings)} findings, "
          f"{len(report.trace_ids)} trace pages, {report.charts} charts) in {time.perf_counter() - t:.1f}s")
    return 0
