"""Lays a trace out as waterfall rows: passes with their stage spans beneath, tools between passes.

The span tree decides the grouping (a server pass is a child of the client pass that sent it, so
both sides sit together); siblings go in time order, so an agent's passes (decide tools, tools,
answer) read top to bottom one after the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.stages import SELF_MS, stage_order
from llmtrace.tracer.storage.time_views import stage_time_observed
from llmtrace.tui.data.records import SpanRecord, TraceRecord

RowKind = Literal["pass", "stage", "tool", "span"]
_ORDER = stage_order()


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    span: SpanRecord
    kind: RowKind
    depth: int
    label: str
    # False where the span's length is a wait that holds the stage, not its measured time (a client pass's stream
    # set-up and prefix match run up to the first byte: tracer/storage/time_views.py CLIENT_WAIT_STAGES)
    time_observed: bool = True

    @property
    def phase(self) -> str | None:
        if self.kind == "tool":
            return self.span.phase or "loops"
        return self.span.phase


def row_kind(span: SpanRecord) -> RowKind:
    if span.is_pass:
        return "pass"
    if span.is_tool:
        return "tool"
    if span.stage:
        return "stage"
    return "span"


def row_label(span: SpanRecord, kind: RowKind) -> str:
    if kind == "pass":
        side = span.side or "?"
        joined = span.attributes.get(N.JOIN_BY)  # an engine trace collect put under this call (otlp_join.py)
        if joined:  # the mark first: a narrow label column cuts the end
            return f"⇄ {side} {span.name} · joined by {str(joined).replace('_', ' ')}"
        return f"{side} {span.name}"
    if kind == "stage" and span.stage:
        number = _ORDER.get(span.stage)
        return f"{number:>2} {span.stage}" if number else span.stage
    return span.name


def build_rows(trace: TraceRecord, phases: Iterable[str] | None = None) -> list[WaterfallRow]:
    """Depth-first rows of the trace; with ``phases``, stage and tool rows outside them are left out."""
    wanted = frozenset(phases) if phases else None
    ids = {s.span_id for s in trace.spans}
    children: dict[str | None, list[SpanRecord]] = {}
    for s in trace.spans:
        parent = s.parent_span_id if s.parent_span_id in ids else None  # orphans (parent elsewhere) go on top
        children.setdefault(parent, []).append(s)
    for group in children.values():
        group.sort(key=_sort_key)
    rows: list[WaterfallRow] = []
    seen: set[str] = set()

    def visit(span: SpanRecord, depth: int, pass_side: str | None) -> None:
        if span.span_id in seen:  # a malformed store could hold a cycle; never loop on it
            return
        seen.add(span.span_id)
        kind = row_kind(span)
        keep = wanted is None or kind in ("pass", "span") or (span.phase or ("loops" if kind == "tool" else None)) in wanted
        if keep:
            timed = kind != "stage" or stage_time_observed(span.stage, pass_side, own_ms(span))
            rows.append(WaterfallRow(span, kind, depth, row_label(span, kind), timed))
        for child in children.get(span.span_id, ()):
            visit(child, depth + 1, span.side if kind == "pass" else pass_side)

    for top in children.get(None, ()):
        visit(top, 0, None)
    return rows


def own_ms(span: SpanRecord) -> float | None:
    """The stage's own time where its span records it (llmtrace.stage.self_ms)."""
    value = span.attributes.get(SELF_MS)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def time_observed(span: SpanRecord, trace: TraceRecord) -> bool:
    """Whether ``span``'s length is its stage's measured time (see WaterfallRow.time_observed)."""
    if not span.stage or span.is_pass or span.is_tool:
        return True
    parent = next((s for s in trace.spans if s.span_id == span.parent_span_id), None)
    side = parent.side if parent is not None and parent.is_pass else None
    return stage_time_observed(span.stage, side, own_ms(span))


def _sort_key(span: SpanRecord) -> tuple[int, int, int, str]:
    # Passes and tools before stages that start at the same instant; then pipeline order.
    rank = 0 if span.is_pass or span.is_tool else 1
    return (span.start_ns, rank, _ORDER.get(span.stage or "", 99), span.span_id)
