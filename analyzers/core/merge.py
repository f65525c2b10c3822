"""One cause, one finding: findings that explain the same root cause are merged before they are shown.

Analyzers look at one symptom each, so a single volatile field is seen by several of them (the prefix
match misses, the system prompt changes, the deploy's hit rate falls). A finding may name its cause
(``Finding.cause``, e.g. ``prompt-window:system:14``); findings with the same cause become one: the
strongest one's title and next step, the stages they cross in pipeline order, the evidence without
repeats, the severity and score of the strongest.
"""

from __future__ import annotations

from dataclasses import replace

from llmtrace.analyzers.core.finding import SEVERITY_RANK, Evidence, Finding
from llmtrace.tracer.registry.stages import get_stage


def _evidence_key(e: Evidence) -> tuple[str, str]:
    return (e.label.lower(), str(e.value))


def merge_findings(findings: list[Finding]) -> list[Finding]:
    """``findings`` with those sharing a cause merged into one, best explanation first."""
    groups: dict[str, list[Finding]] = {}
    order: list[str] = []
    for i, f in enumerate(sorted(findings, key=Finding.sort_key)):
        key = f.cause or f"#{i}"
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(f)
    out = [_merge(groups[k]) for k in order]
    out.sort(key=Finding.sort_key)
    return out


def _merge(group: list[Finding]) -> Finding:
    if len(group) == 1:
        return group[0]
    # the finding that measured what the cause lost leads (its title says where and how much); the others
    # contribute their stages and evidence
    best = min(group, key=lambda f: (f.loss_tokens <= 0 and f.loss_ms <= 0, f.sort_key()))
    stages = sorted({s for f in group for s in (f.stages or (f.stage,))}, key=lambda s: get_stage(s).number)
    seen: set[tuple[str, str]] = set()
    evidence: list[Evidence] = []
    for f in group:
        for e in f.evidence:
            k = _evidence_key(e)
            if k not in seen:
                seen.add(k)
                evidence.append(e)
    ids: list[str] = []
    for f in group:
        ids += [t for t in f.trace_ids if t not in ids]
    severity = max((f.severity for f in group), key=lambda s: SEVERITY_RANK[s])
    evidence.sort(key=lambda e: not any(e is x for x in best.evidence))  # the lead's own evidence first
    return replace(best, stages=tuple(stages), evidence=tuple(evidence), trace_ids=tuple(ids[:5]),
                   severity=severity, score=max(f.score for f in group),
                   symptoms=tuple(dict.fromkeys(s for f in group for s in (f.symptoms or (f.symptom,)))))
