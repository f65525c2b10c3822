"""``llmtrace check``: the analyzers' CI gate (analyzers/gate/check_cli.py) and its HTML artifact. ``--html
FILE`` draws the report's regression page (llmtrace/report), which sits above the analyzers, so the command
that joins the two lives here, above both: the analyzers never import the report (an import-linter contract
in pyproject.toml says so)."""

from __future__ import annotations

import argparse

from llmtrace.analyzers.gate import check_cli
from llmtrace.analyzers.gate.check_cli import GateRun


def add_arguments(parser: argparse.ArgumentParser) -> None:
    check_cli.add_arguments(parser)
    parser.add_argument("--html", metavar="FILE", help="also write the HTML report, the regression first, baseline "
                                                       "and candidate side by side (needs llmtrace-stages[report])")


def run(args: argparse.Namespace) -> int:
    html = getattr(args, "html", None)
    if not html:
        return check_cli.run(args)

    def write_html(gate: GateRun) -> None:
        # (only a run that asks pays for the report's imports)
        from llmtrace.report import Focus, write_regression_report

        focus = Focus(gate.header, gate.verdicts, gate.current, gate.baseline, gate.against, gate.baseline_deploy)
        write_regression_report(html, gate.query.conn, focus, gate.query.since_ns, getattr(args, "service", None),
                                args.parquet or args.db or "")

    return check_cli.run(args, write_html)
