"""What an analyzer hands back: a named stage, the evidence that points at it, and what to check next.

Findings cross into the CLI, the TUI and CI output, so they are frozen and hold only plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmtrace.tracer.registry import stage_ids as S

Severity = Literal["info", "warning", "critical"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One boundary value (or aggregate of them) with the traces it came from and, where it helps,
    what the same value looks like when nothing is wrong."""

    label: str
    value: object
    unit: str = ""
    trace_ids: tuple[str, ...] = ()
    baseline: object | None = None

    def to_dict(self) -> dict[str, object]:
        return {"label": self.label, "value": _plain(self.value), "unit": self.unit,
                "trace_ids": list(self.trace_ids), "baseline": _plain(self.baseline)}

    def render_value(self) -> str:
        text = _fmt(self.value) + (f" {self.unit}" if self.unit else "")
        if self.baseline is not None:
            text += f" (baseline {_fmt(self.baseline)}{' ' + self.unit if self.unit else ''})"
        return text


SECURITY_STAGES = frozenset({S.SAFETY_INJECTION})
FAILED_CALLS = "failed_calls"  # the symptom of calls that failed outright (analyzers/symptoms/failed_calls.py)


@dataclass(frozen=True, slots=True)
class Finding:
    """A symptom explained by one stage. ``score`` ranks findings: the share of the symptom this stage
    explains (0..1) weighted by severity, so the best explanation sorts first."""

    symptom: str
    phase: str
    stage: str
    severity: Severity
    title: str
    summary: str
    evidence: tuple[Evidence, ...]
    trace_ids: tuple[str, ...]
    next_check: str
    score: float
    # What was lost to this cause over the window (tokens re-prefilled, TTFT ms, USD); findings rank by it.
    loss_tokens: float = 0.0
    loss_ms: float = 0.0
    loss_usd: float = 0.0
    affected_share: float = 0.0  # share of the window's passes the cause touched
    cause: str = ""  # a root-cause key: findings with the same one are merged (analyzers/core/merge.py)
    stages: tuple[str, ...] = ()  # every stage the cause crosses, pipeline order (empty: just ``stage``)
    symptoms: tuple[str, ...] = ()  # every symptom it explains (empty: just ``symptom``)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"severity must be info, warning or critical, not {self.severity!r}")
        if not isinstance(self.evidence, tuple) or not isinstance(self.trace_ids, tuple):
            raise ValueError("evidence and trace_ids must be tuples (findings are read-only)")

    def to_dict(self) -> dict[str, object]:
        return {
            "symptom": self.symptom, "phase": self.phase, "stage": self.stage, "severity": self.severity,
            "title": self.title, "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence],
            "trace_ids": list(self.trace_ids), "next_check": self.next_check, "score": round(self.score, 4),
            "stages": list(self.stages or (self.stage,)), "symptoms": list(self.symptoms or (self.symptom,)),
            "loss": {"tokens": round(self.loss_tokens, 1), "ttft_ms": round(self.loss_ms, 1),
                     "usd": round(self.loss_usd, 6), "share_of_passes": round(self.affected_share, 4)},
        }

    def sort_key(self) -> tuple[int, int, float, float, float]:
        """Severity first (a clean run's info never outranks a problem); at one severity a security finding
        (instructions from outside the app that reached the model) before any other, since it costs no time
        and would otherwise rank under every latency finding, then failed calls (each lost outright, ranked
        among themselves by the share that failed: their score); then what the cause cost (TTFT and decode time
        lost), then the analyzer's score."""
        first = 0 if self.stage in SECURITY_STAGES else 1 if FAILED_CALLS in (self.symptoms or (self.symptom,)) else 2
        return (-SEVERITY_RANK[self.severity], first, -round(self.loss_ms, 1), -self.score, -self.loss_tokens)


def _plain(value: object) -> object:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value)
    return str(value)
