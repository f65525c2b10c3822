"""One finding laid out for people, the same parts wherever it is drawn: the terminal (render.py, rich and plain
text), the explorer's findings pane (tui/components/findings_pane.py) and the report's HTML card
(report/page.py). Each of those only draws these parts in its medium; what a part says (where the cause sits,
what was lost, an evidence value with its unit and baseline, which traces) is decided here once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmtrace.analyzers.core.finding import Finding
from llmtrace.tracer.registry.stages import get_phase, get_stage, is_stage


@dataclass(frozen=True, slots=True)
class EvidenceLine:
    label: str
    value: str  # the value with its unit, and the baseline beside it where there is one
    trace_ids: tuple[str, ...]  # as the evidence quotes them (a trace once per pass)

    @property
    def traces(self) -> tuple[str, ...]:
        """The distinct traces, in order."""
        return tuple(dict.fromkeys(self.trace_ids))


@dataclass(frozen=True, slots=True)
class FindingLayout:
    rank: int
    severity: str
    title: str
    symptom: str
    phase: str
    phase_title: str  # "?" for a finding without a phase
    stage: str
    stage_known: bool  # the stage is a registry stage (its boundary values can be looked up)
    where: str  # "Phase → stage (#n title)"; a merged cause adds the stages it crosses
    score: float
    summary: str
    loss: str  # "lost: 1,200 tokens, 340 ms on 12% of passes", or ""
    evidence: tuple[EvidenceLine, ...]
    next_check: str
    trace_ids: tuple[str, ...]  # as the finding quotes them

    @property
    def traces(self) -> tuple[str, ...]:
        """The finding's distinct traces, in order."""
        return tuple(dict.fromkeys(self.trace_ids))


def layout(f: Finding, rank: int = 0) -> FindingLayout:
    phase_title = get_phase(f.phase).title if f.phase else "?"
    return FindingLayout(
        rank=rank, severity=f.severity, title=f.title, symptom=f.symptom, phase=f.phase, phase_title=phase_title,
        stage=f.stage, stage_known=is_stage(f.stage), where=_where(f, phase_title), score=f.score,
        summary=f.summary, loss=_loss(f),
        evidence=tuple(EvidenceLine(e.label, e.render_value(), e.trace_ids) for e in f.evidence),
        next_check=f.next_check, trace_ids=f.trace_ids)


def short_ids(ids: Sequence[str], n: int = 3) -> str:
    """A few trace ids, shortened, for a line of text."""
    return ", ".join(i[:12] for i in ids[:n]) + (" …" if len(ids) > n else "")


def _where(f: Finding, phase_title: str) -> str:
    where = f"{phase_title} → {f.stage}"
    if is_stage(f.stage):
        stage = get_stage(f.stage)
        where += f" (#{stage.number} {stage.title})"
    if len(f.stages) > 1:  # a merged cause: the stages it crosses, in pipeline order
        where += f"; crosses {' → '.join(f.stages)}"
    return where


def _loss(f: Finding) -> str:
    parts = []
    if f.loss_tokens:
        parts.append(f"{f.loss_tokens:,.0f} tokens")
    if f.loss_ms:
        parts.append(f"{f.loss_ms:,.0f} ms")
    if f.loss_usd:
        parts.append(f"${f.loss_usd:.4f}")
    text = ("lost: " + ", ".join(parts)) if parts else ""
    if f.affected_share:  # where the loss fell, not a loss of its own: "lost 83% of passes" read as one
        text += f"{' ' if text else ''}on {f.affected_share:.0%} of passes"
    return text
