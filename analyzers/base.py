"""The shape every symptom analyzer shares: a symptom id, ``analyze(conn)`` and a helper that fills in
the phase from the stage registry, so a finding can never name a stage that does not exist."""

from __future__ import annotations

import duckdb

from llmtrace.analyzers.finding import Evidence, Finding, Severity
from llmtrace.analyzers.query import Query
from llmtrace.tracer.stages import get_stage


class SymptomAnalyzer:
    """Subclasses set ``symptom`` and implement ``find(q)``; ``analyze`` is the public verb."""

    symptom: str = ""

    def analyze(self, conn: duckdb.DuckDBPyConnection, since_ns: int | None = None,
                query: Query | None = None) -> list[Finding]:
        """Findings for this symptom, best first. ``query`` lets a run share one materialized view."""
        q = query if query is not None else Query(conn, since_ns)
        findings = self.find(q)
        findings.sort(key=Finding.sort_key)
        return findings

    def find(self, q: Query) -> list[Finding]:
        raise NotImplementedError

    def finding(self, stage: str, severity: Severity, title: str, summary: str, evidence: list[Evidence],
                trace_ids: tuple[str, ...], next_check: str, score: float) -> Finding:
        return Finding(
            symptom=self.symptom, phase=get_stage(stage).phase, stage=stage, severity=severity, title=title,
            summary=summary, evidence=tuple(evidence), trace_ids=trace_ids, next_check=next_check,
            score=max(0.0, min(1.0, score)),
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.symptom}>"


def severity_for(share: float, warn: float = 0.2, crit: float = 0.5) -> Severity:
    """Severity from the share of passes affected."""
    return "critical" if share >= crit else "warning" if share >= warn else "info"
