"""``llmtrace diagnose``: run the analyzers over a store (or a Parquet export) and print the findings.

    llmtrace diagnose                              # every symptom, ./llmtrace.duckdb
    llmtrace diagnose --search "first token is slow"
    llmtrace diagnose --symptom broken_json --json
    llmtrace diagnose --parquet 'export/**/*.parquet' --since 2h
"""

from __future__ import annotations

import argparse
import json
import sys

from llmtrace.tracer.cli import timewindow
from llmtrace.tracer.registry.symptoms import SYMPTOMS, search_symptoms
from llmtrace.tracer.storage.store import StoreError, read_store


def parse_since(text: str | None, now_ns: int | None = None) -> int | None:
    """The one ``--since`` parser of the read commands (tracer/timewindow: 30m, 2h, 7d, 1h30m, ISO dates),
    plus a bare nanosecond timestamp as earlier versions took; None for None."""
    if text is None:
        return None
    if text.strip().isdigit():
        return int(text)
    return timewindow.parse_since(text, now_ns)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="store file (default: $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--parquet", metavar="GLOB", help="analyse a Parquet export instead")
    parser.add_argument("--store", metavar="URL", help="ClickHouse: clickhouse://HOST:8123/DB or chdb://PATH "
                                                       "(default: $LLMTRACE_STORE; docs/scale.md)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--symptom", action="append", metavar="NAME",
                       help=f"only this symptom (repeatable): {', '.join(s.id for s in SYMPTOMS)}")
    which.add_argument("--search", metavar="TEXT", help='describe the complaint: "json is cut off"')
    parser.add_argument("--since", help="only spans from the last 30m / 2h / 7d / 1h30m, or after an ISO date/time "
                                        "(UTC unless it has an offset) or a ns timestamp")
    parser.add_argument("--service", metavar="NAME", help="only the traces this service took part in "
                                                          "(a collector's store holds many apps)")
    parser.add_argument("--json", action="store_true", help="print findings as JSON")
    parser.add_argument("--limit", type=int, default=None, help="print at most N findings")
    parser.add_argument("--what-if-log", metavar="FILE", help="write the recorded requests (capture=full) as JSONL "
                        "with each volatile window moved after the stable part, to replay and measure the fix")


def choose_symptoms(symptom: list[str] | None, search: str | None) -> list[str] | None:
    if symptom:
        known = {s.id for s in SYMPTOMS}
        bad = [s for s in symptom if s not in known]
        if bad:
            raise ValueError(f"unknown symptom {', '.join(bad)}; one of: {', '.join(sorted(known))}")
        return symptom
    if search is not None:
        matches = search_symptoms(search)
        if not matches:
            raise ValueError(f"no symptom matches {search!r}; try words like 'slow first token', 'json', "
                             "'different answer', 'forgets', 'cost'")
        return [m.id for m in matches[:3]]
    return None


def run(args: argparse.Namespace) -> int:
    from llmtrace.analyzers import run_analyzers
    from llmtrace.analyzers.core.render import print_findings

    try:
        symptoms = choose_symptoms(args.symptom, args.search)
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"llmtrace diagnose: {exc}", file=sys.stderr)
        return 2
    try:
        with read_store(args.db, args.parquet, store=getattr(args, "store", None),
                        env_store=True) as conn:
            if getattr(args, "what_if_log", None):
                from llmtrace.analyzers.cache.what_if_log import run_log

                return run_log(conn, args.what_if_log, since, args.service)
            findings = run_analyzers(conn, symptoms, since, args.service)
    except StoreError as exc:
        print(f"llmtrace diagnose: {exc}", file=sys.stderr)
        return 1
    if args.limit is not None:
        findings = findings[: max(0, args.limit)]
    if args.json:
        out = {"symptoms": symptoms or [s.id for s in SYMPTOMS], "findings": [f.to_dict() for f in findings]}
        sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
        return 0
    if symptoms is not None and args.search is not None:
        print(f"Matched {args.search!r} to: {', '.join(symptoms)}\n")
    print_findings(findings)
    return 0
