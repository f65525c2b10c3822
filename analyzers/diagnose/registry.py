"""The analyzer table: symptom id -> analyzer, and the ranked run over all (or some) of them."""

from __future__ import annotations

import duckdb

from llmtrace.analyzers.core.base import Analyzer
from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.analyzers.diagnose.catalog import build_analyzers

ANALYZERS: dict[str, Analyzer] = build_analyzers()


def run_analyzers(conn: duckdb.DuckDBPyConnection, symptoms: list[str] | None = None,
                  since_ns: int | None = None, service: str | None = None, *,
                  threads: int | None = None) -> list[Finding]:
    """Run the analyzers for ``symptoms`` (all when None) and return findings, best explanation first.

    ``since_ns`` restricts every analyzer to spans that started at or after that wall-clock time, ``service``
    to the traces that service took part in. Findings that share a root cause come back merged (one finding
    listing the stages it crosses). ``threads``: how many analyzers run at once (analyzers/core/concurrent_run.py;
    default: the cores, up to four); 1 runs them one by one. The findings do not depend on it.
    """
    from llmtrace.analyzers.core.concurrent_run import analyze_all
    from llmtrace.analyzers.core.merge import merge_findings
    from llmtrace.tracer.registry.symptoms import get_symptom

    chosen = list(ANALYZERS) if symptoms is None else symptoms
    for s in chosen:
        get_symptom(s)  # a clear KeyError for a name that is not in the table
    q = Query(conn, since_ns, service)
    try:
        per_analyzer = analyze_all(q, [ANALYZERS[s] for s in chosen if s in ANALYZERS], threads)
    finally:
        q.release()
    return merge_findings([f for found in per_analyzer for f in found])
