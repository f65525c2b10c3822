"""The "where the time goes" bar: a pass's (or a selection's) wall clock as phase segments in phase colours,
the provider's unobserved share dotted, what no stage claims grey; a call that could not be split (a client that
saw no first token: a buffered answer, a failed call) one piece, "the whole call (not split)", with its latency."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.stages import get_phase
from llmtrace.tracer.storage.time_views import WHOLE_CALL, WHOLE_CALL_TITLE
from llmtrace.tui import format as fmt
from llmtrace.tui.theme import OTHER_COLOUR, PASS_COLOUR, phase_colour

UNOBSERVED = "unobserved"
OTHER = "other"


def phase_parts(rows: Sequence[tuple[str | None, str, float]]) -> list[tuple[str, float]]:
    """(phase or 'unobserved'/'other', ms) in pipeline order from time_breakdown rows (phase, stage, ms)."""
    totals: dict[str, float] = {}
    for phase, stage, ms in rows:
        key = phase or (UNOBSERVED if stage == UNOBSERVED else OTHER)
        totals[key] = totals.get(key, 0.0) + max(0.0, ms or 0.0)
    return sorted(totals.items(), key=lambda kv: _order(kv[0]))


def whole_call_parts(rows: Sequence[tuple[str | None, str, float]]) -> list[tuple[str, float]]:
    """Like ``phase_parts`` for a pass whose time could not be split (time_views.pass_is_split): the connection
    it opened, then everything else as one part, the whole call."""
    connect = sum(max(0.0, ms or 0.0) for _, stage, ms in rows if stage == S.ARRIVAL_CONNECTION)
    rest = sum(max(0.0, ms or 0.0) for _, stage, ms in rows if stage != S.ARRIVAL_CONNECTION)
    return [(k, v) for k, v in (("arrival", connect), (WHOLE_CALL, rest)) if v > 0 or k == WHOLE_CALL]


def _order(key: str) -> int:
    if key == WHOLE_CALL:
        return 50
    if key == UNOBSERVED:
        return 90
    if key == OTHER:
        return 99
    try:
        return get_phase(key).order
    except KeyError:
        return 98


def time_bar(parts: Sequence[tuple[str, float]], width: int, *, legend: bool = True,
             whole_ms: float | None = None) -> Text:
    """``width`` columns of bar (each part at least one column when it is non-zero), then a legend. The whole call
    part's legend says its latency (``whole_ms``) where it is given, not a share of itself."""
    total = sum(ms for _, ms in parts)
    text = Text()
    if total <= 0 or width <= 0:
        return text.append("no time recorded for this selection", style="dim")
    cols = _columns([ms for _, ms in parts], width)
    for (key, _), n in zip(parts, cols, strict=True):
        if n:
            glyph, style = _look(key)
            text.append(glyph * n, style=style)
    if legend:
        text.append("\n")
        for key, ms in parts:
            if ms / total >= 0.005:
                _, style = _look(key)
                amount = fmt.ms(whole_ms) if key == WHOLE_CALL and whole_ms is not None else f"{ms / total:.0%}"
                text.append(f"{_title(key)} {amount}  ", style=style.replace("on ", ""))
    return text


def _columns(values: list[float], width: int) -> list[int]:
    total = sum(values)
    raw = [v / total * width for v in values]
    cols = [int(r) for r in raw]
    for i, v in enumerate(values):  # a visible part never vanishes
        if v > 0 and cols[i] == 0:
            cols[i] = 1
    while sum(cols) > width:
        i = max(range(len(cols)), key=lambda j: cols[j])
        cols[i] -= 1
    order = sorted(range(len(raw)), key=lambda j: raw[j] - int(raw[j]), reverse=True)
    for i in order:
        if sum(cols) >= width:
            break
        if values[i] > 0:
            cols[i] += 1
    return cols


def _look(key: str) -> tuple[str, str]:
    if key == WHOLE_CALL:
        return "▒", PASS_COLOUR
    if key == UNOBSERVED:
        return "·", "dim"
    if key == OTHER:
        return "░", OTHER_COLOUR
    return "█", phase_colour(key)


def _title(key: str) -> str:
    if key == WHOLE_CALL:
        return WHOLE_CALL_TITLE
    if key in (UNOBSERVED, OTHER):
        return key
    try:
        return get_phase(key).title
    except KeyError:
        return key
