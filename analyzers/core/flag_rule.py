"""The "count the flagged spans, quote a few, say what that means" check as data.

A :class:`FlagRule` names a stage, the values it reads (registry constants, typed by the registry), the
filter and aggregates of :meth:`Query.flagged`, and the finding to make of the one row that check returns;
:func:`flag_findings` runs a table of rules in order, one finding per rule whose filter matched a span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, Row

if TYPE_CHECKING:
    from llmtrace.analyzers.core.base import SymptomAnalyzer


@dataclass(frozen=True, slots=True)
class Quote:
    """One piece of evidence read off the flagged row: ``column`` (``n``, how many spans matched, or an alias
    of the rule's aggregates), with ``baseline`` another column to set beside it."""

    label: str
    column: str
    unit: str = ""
    baseline: str | None = None

    def evidence(self, row: Row, ids: tuple[str, ...]) -> Evidence:
        return Evidence(self.label, row[self.column], self.unit, ids,
                        baseline=None if self.baseline is None else row[self.baseline])


@dataclass(frozen=True, slots=True)
class FlagRule:
    """Spans of ``stage`` matching ``where`` (over the ``values`` aliases) make one finding: ``title`` is
    formatted with the row (``{n}`` and the ``aggs`` aliases), the evidence quotes the row."""

    stage: str
    values: Mapping[str, str]  # alias -> value name (a registry constant)
    where: str
    aggs: str
    severity: Severity
    title: str
    summary: str
    evidence: tuple[Quote, ...]
    next_check: str
    score: float


def flag_findings(analyzer: SymptomAnalyzer, q: Query, rules: Sequence[FlagRule]) -> list[Finding]:
    """A finding for each rule in ``rules`` whose filter matched at least one span, in the rules' order."""
    out: list[Finding] = []
    for rule in rules:
        hit = q.flagged(rule.stage, rule.values, rule.where, rule.aggs)
        if hit is None:
            continue
        row, ids = hit
        out.append(analyzer.finding(
            rule.stage, rule.severity, rule.title.format(**row), rule.summary,
            [quote.evidence(row, ids) for quote in rule.evidence], ids, rule.next_check, rule.score,
        ))
    return out
