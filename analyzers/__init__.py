"""Analyzers: each symptom of the table in STAGES.md as SQL over the store's views plus a little Python.

    from llmtrace.tracer.storage.store import read_connection
    from llmtrace.analyzers import run_analyzers
    with read_connection("llmtrace.duckdb") as conn:
        for finding in run_analyzers(conn):
            print(finding.stage, finding.title)

``ANALYZERS`` maps a symptom id (see ``llmtrace.tracer.registry.symptoms``) to an object with
``analyze(conn) -> list[Finding]``.
"""

from __future__ import annotations

from llmtrace.analyzers.finding import Evidence, Finding, Severity
from llmtrace.analyzers.registry import ANALYZERS, run_analyzers

__all__ = ["ANALYZERS", "Evidence", "Finding", "Severity", "run_analyzers"]
