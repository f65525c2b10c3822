"""``llmtrace report``: one self-contained HTML page (no script, no network) with the findings, the cache hit
rate over time and by deploy, where the time goes, latency and cost by deploy, hit rate against KV pool
size, and a page per linked trace. ``llmtrace check --html`` writes the same page focused on a regression.

    from llmtrace.report import Options, Selection, build_report
    with read_store("llmtrace.duckdb") as conn:
        Path("report.html").write_text(build_report(conn, Options(selection=Selection(service="app"))).html)

Charts need the optional extra ``report`` (``pip install 'llmtrace-stages[report]'``, vl-convert-python); this
package imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmtrace.report.build import Options, Report, build_report
from llmtrace.report.charts import ChartsUnavailable
from llmtrace.report.data import Selection
from llmtrace.report.focus import Focus

if TYPE_CHECKING:
    import duckdb

__all__ = ["ChartsUnavailable", "Focus", "Options", "Report", "Selection", "build_report", "write_regression_report"]


def write_regression_report(path: str, conn: duckdb.DuckDBPyConnection, focus: Focus, since_ns: int | None = None,
                            service: str | None = None, source: str = "") -> Report | None:
    """What ``llmtrace check --html FILE`` calls: the report over ``conn`` with the regression first. The gate's
    verdict stands without it, so a missing charting extra is said on stderr, not raised."""
    import sys
    from pathlib import Path

    try:
        report = build_report(conn, Options(selection=Selection(since_ns, service), source=source,
                                            title="llmtrace check: regression report", focus=focus))
    except ChartsUnavailable as exc:
        print(f"llmtrace check: no HTML report: {exc}", file=sys.stderr)
        return None
    Path(path).write_text(report.html, encoding="utf-8")
    return report
