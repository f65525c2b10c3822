"""Injection scan of untrusted text (tool outputs, retrieved pages) before it enters a prompt.

Counts what a reader cannot see (zero-width and bidi characters), look-alike letters inside Latin words,
and phrases that read like instructions to the model (the one list, ``tracer/reading/untrusted_text.py``,
that the middleware's per-segment counts and the analyzers match too); combines them into a 0..1 score and
an action (allow / flag / block). Records ``safety.injection``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading import untrusted_text
from llmtrace.tracer.reading.textscan import count_chars, strip_hidden
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

ACTIONS = ("allow", "flag", "block")


@dataclass(frozen=True, slots=True)
class InjectionReport:
    spans_scanned: int
    invisible_chars: int
    confusables: int
    instruction_patterns: int
    score: float
    action: str
    matches: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return self.action == "allow"


def _score(hidden: int, confusables: int, patterns: int) -> float:
    # Independent signals combined as 1 - prod(1 - p): any strong signal dominates, weak ones add up.
    miss = 1.0
    miss *= 0.6 ** min(patterns, 10)  # each instruction-like phrase
    miss *= 0.85 ** min(hidden, 20)  # each hidden character
    miss *= 0.9 ** min(confusables, 20)  # each look-alike letter inside a Latin word
    return round(1.0 - miss, 4)


def scan(
    texts: str | Iterable[str],
    *,
    flag_at: float = 0.3,
    block_at: float = 0.7,
    parent: rec.PassSpan | None = None,
) -> InjectionReport:
    """Scan one or more untrusted spans; the action is block / flag / allow by the score thresholds."""
    if not 0 < flag_at <= block_at <= 1:
        raise ValueError("thresholds must satisfy 0 < flag_at <= block_at <= 1")
    spans = [texts] if isinstance(texts, str) else list(texts)
    hidden = conf = pats = 0
    matches: list[str] = []
    for text in spans:
        if not isinstance(text, str):
            raise ValueError(f"scan takes strings, got {type(text).__name__}")
        c = count_chars(text)
        hidden += c.hidden
        conf += c.confusables
        # Hidden characters can split a phrase to dodge a filter: match on the visible text.
        visible = strip_hidden(text) if c.hidden else text
        found = [m.group(0).strip() for m in untrusted_text.ORDERS.finditer(visible)]
        pats += len(found)
        matches.extend(found)
    score = _score(hidden, conf, pats)
    action = "block" if score >= block_at else "flag" if score >= flag_at else "allow"
    report = InjectionReport(len(spans), hidden, conf, pats, score, action, tuple(matches[:20]))
    with rec.stage(
        S.SAFETY_INJECTION,
        {
            N.INJECTION_SPANS_SCANNED: report.spans_scanned,
            N.INJECTION_INVISIBLE_CHARS: hidden,
            N.INJECTION_CONFUSABLES: conf,
            N.INJECTION_INSTRUCTION_PATTERNS: pats,
            N.INJECTION_SCORE: score,
            N.INJECTION_ACTION: action,
        },
        parent=parent,
    ):
        pass
    return report
