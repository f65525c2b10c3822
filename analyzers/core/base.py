"""The shape every symptom analyzer shares: a symptom id, ``analyze(conn)`` and a helper that fills in
the phase from the stage registry, so a finding can never name a stage that does not exist."""

from __future__ import annotations

from typing import Protocol

import duckdb

from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry.stages import get_stage


class Analyzer(Protocol):
    """One symptom's analyzer: ``analyze(conn)`` returns its findings, best first. ``query`` lets a run of
    several analyzers share one materialized pass table; ``reads_passes`` says whether it reads that table (a
    hint for scheduling: the others run while it is built)."""

    symptom: str
    reads_passes: bool

    def analyze(self, conn: duckdb.DuckDBPyConnection, since_ns: int | None = None,
                query: Query | None = None) -> list[Finding]: ...


class SymptomAnalyzer:
    """Subclasses set ``symptom`` and implement ``find(q)``; ``analyze`` is the public verb."""

    symptom: str = ""
    # whether ``find`` reads ``q.passes``: a concurrent run starts the analyzers that do not while the pass
    # table is built (tests/analyzers/test_concurrent_run.py holds each to what it really reads)
    reads_passes: bool = True

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
                trace_ids: tuple[str, ...], next_check: str, score: float, *, cause: str = "",
                stages: tuple[str, ...] = (), loss_tokens: float = 0.0, loss_ms: float = 0.0,
                loss_usd: float = 0.0, affected_share: float = 0.0) -> Finding:
        """A finding for ``stage``; ``cause`` names its root cause so other analyzers' findings of the same
        cause merge with it, and the losses rank it."""
        return Finding(
            symptom=self.symptom, phase=get_stage(stage).phase, stage=stage, severity=severity, title=title,
            summary=summary, evidence=tuple(evidence), trace_ids=trace_ids, next_check=next_check,
            score=max(0.0, min(1.0, score)), cause=cause,
            stages=tuple(sorted(set(stages), key=lambda s: get_stage(s).number)) if stages else (),
            loss_tokens=max(0.0, loss_tokens), loss_ms=max(0.0, loss_ms), loss_usd=max(0.0, loss_usd),
            affected_share=max(0.0, min(1.0, affected_share)),
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.symptom}>"


def severity_for(share: float, warn: float = 0.2, crit: float = 0.5) -> Severity:
    """Severity from the share of passes affected."""
    return "critical" if share >= crit else "warning" if share >= warn else "info"
