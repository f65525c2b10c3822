"""Injection scan of untrusted text (tool outputs, retrieved pages) before it enters a prompt.

Counts what a reader cannot see (zero-width and bidi characters), look-alike letters inside Latin words,
and phrases that read like instructions to the model; combines them into a 0..1 score and an action
(allow / flag / block). Records ``safety.injection``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

from .textscan import count_chars, strip_hidden

_INSTRUCTIONS = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+"
    r"(?:all\s+|any\s+|the\s+|your\s+|previous\s+|prior\s+|above\s+|earlier\s+)*"
    r"(?:instructions|rules|prompts?|directions|guidelines|context)\b"
    r"|\byou\s+are\s+now\b|\bnew\s+instructions?\s*:|\bsystem\s+prompt\b|\bact\s+as\s+(?:an?\s+)?\w+"
    r"|\bdo\s+not\s+(?:tell|inform|reveal\s+to)\s+the\s+user\b"
    r"|\breveal\s+(?:your|the)\s+(?:system\s+prompt|instructions|secrets?|api\s+keys?)\b"
    r"|\b(?:send|email|post|upload|exfiltrate)\s+(?:the\s+|all\s+|your\s+)*"
    r"(?:conversation|credentials|password|api\s+keys?|secrets?)\b"
    r"|<\|im_start\|>|<\|system\|>|\[/?INST\]|^\s*#{2,}\s*(?:system|instruction)s?\b|\bBEGIN\s+SYSTEM\b"
    r"|^\s*(?:system|assistant)\s*:",
    re.IGNORECASE | re.MULTILINE,
)

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
        found = [m.group(0).strip() for m in _INSTRUCTIONS.finditer(visible)]
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
