"""The analyzer table: symptom id -> analyzer, and the ranked run over all (or some) of them."""

from __future__ import annotations

from typing import Protocol

import duckdb

from llmtrace.analyzers.catalog import build_analyzers
from llmtrace.analyzers.finding import Finding
from llmtrace.analyzers.query import Query


class Analyzer(Protocol):
    """One symptom's analyzer: ``analyze(conn)`` returns its findings, best first. ``query`` lets a run of
    several analyzers share one materialized ``requests`` table."""

    symptom: str

    def analyze(self, conn: duckdb.DuckDBPyConnection, since_ns: int | None = None,
                query: Query | None = None) -> list[Finding]: ...


ANALYZERS: dict[str, Analyzer] = build_analyzers()


def run_analyzers(conn: duckdb.DuckDBPyConnection, symptoms: list[str] | None = None,
                  since_ns: int | None = None, service: str | None = None) -> list[Finding]:
    """Run the analyzers for ``symptoms`` (all when None) and return findings, best explanation first.

    ``since_ns`` restricts every analyzer to spans that started at or after that wall-clock time, ``service``
    to the traces that service took part in. Findings that share a root cause come back merged (one finding
    listing the stages it crosses).
    """
    from llmtrace.analyzers.merge import merge_findings
    from llmtrace.tracer.registry.symptoms import get_symptom

    chosen = list(ANALYZERS) if symptoms is None else symptoms
    for s in chosen:
        get_symptom(s)  # a clear KeyError for a name that is not in the table
    findings: list[Finding] = []
    q = Query(conn, since_ns, service)
    try:
        for s in chosen:
            analyzer = ANALYZERS.get(s)
            if analyzer is not None:
                findings.extend(analyzer.analyze(conn, since_ns, query=q))
    finally:
        q.release()
    return merge_findings(findings)
