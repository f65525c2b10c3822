"""One finding layout (analyzers/core/finding_layout.py) drawn three ways: the terminal's plain and rich text, the
explorer's findings pane and the report's HTML card show the same parts: title, stage, summary, each evidence
value with its unit and baseline, and the next check."""

from __future__ import annotations

from html import unescape

from rich.console import Console

from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.finding_layout import layout
from llmtrace.analyzers.core.render import FindingView, plain
from llmtrace.report.page import finding_card
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tui.components.findings_pane import _detail

FINDING = Finding(
    "slow_first_token", "cache", S.CACHE_PREFIX_MATCH, "warning", "A timestamp in the system prompt breaks the cache",
    "Every pass re-prefills the system prompt.",
    (Evidence("cached tokens", 0, "tokens", ("a" * 32, "a" * 32), baseline=1200),
     Evidence("prefix hit ratio", 0.25, "", ("b" * 32,))),
    ("a" * 32, "b" * 32), "Move the timestamp after the cached prefix.", 0.8, loss_tokens=1200.0, loss_ms=340.0,
    stages=(S.INTAKE_SYSTEM_PROMPT, S.CACHE_PREFIX_MATCH))


def _text(renderable: object) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_layout_says_each_part_once() -> None:
    f = layout(FINDING, 2)
    assert f.where.startswith(f"Cache & reuse → {S.CACHE_PREFIX_MATCH} (#") and "crosses" in f.where
    assert f.loss == "lost: 1,200 tokens, 340 ms"
    assert [e.value for e in f.evidence] == ["0 tokens (baseline 1200 tokens)", "0.25"]
    assert f.evidence[0].traces == ("a" * 32,) and f.stage_known


def test_terminal_pane_and_report_draw_the_same_parts() -> None:
    f = layout(FINDING, 1)
    drawn = {"plain": plain([FINDING]), "rich": _text(FindingView(FINDING, 1)), "pane": _text(_detail(FINDING)),
             "html": unescape(finding_card(1, FINDING, set()))}
    for medium, text in drawn.items():
        flat = " ".join(text.split())
        for part in (f.title, f.stage, f.summary, f.next_check, *(e.value for e in f.evidence),
                     *(e.label for e in f.evidence)):
            assert " ".join(part.split()) in flat, f"{medium} lacks {part!r}"
