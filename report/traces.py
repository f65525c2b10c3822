"""One trace laid out for its page: the spans split into the client's side (the app, its passes, tools) and
the server's (the engine's pass and stages), each as waterfall rows with self time where the stage records
it, and the boundary values of every stage.

A span belongs to the side of the nearest pass above it (or itself); spans above every pass — the app's
agent span, tool calls between passes — are on the client's side, which is what the app can see.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.report.data import Span
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.semconv import LLMTRACE_PHASE, LLMTRACE_STAGE
from llmtrace.tracer.registry.stages import PASS_KEYS, stage_order
from llmtrace.tracer.storage.time_views import stage_time_observed

_ORDER = stage_order()
TEXT_KEYS = (N.PROMPT_TEXT, N.OUTPUT_TEXT)  # stored only with capture="full"
_SKIP = {LLMTRACE_STAGE, LLMTRACE_PHASE, N.SIDE, N.GEN_AI_OPERATION_NAME, N.PROMPT_SEGMENTS,
         *TEXT_KEYS}


@dataclass(frozen=True, slots=True)
class Row:
    span: Span
    depth: int
    kind: str  # pass, stage, tool, span
    # False where the span's length is a wait that holds the stage, not its measured time (a client pass's stream
    # set-up and prefix match run up to the first byte: tracer/storage/time_views.py CLIENT_WAIT_STAGES)
    timed: bool = True

    @property
    def label(self) -> str:
        s = self.span
        if self.kind == "stage" and s.stage:
            n = _ORDER.get(s.stage)
            return f"{n:>2} {s.stage}" if n else s.stage
        return s.name


@dataclass(frozen=True, slots=True)
class TraceView:
    trace_id: str
    start_ns: int
    end_ns: int
    client: tuple[Row, ...]
    server: tuple[Row, ...]
    texts: tuple[tuple[str, str], ...]  # (key, text) of prompt/output text, empty unless captured in full

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def layout(trace_id: str, spans: list[Span]) -> TraceView | None:
    if not spans:
        return None
    by_id = {s.span_id: s for s in spans}
    children: dict[str | None, list[Span]] = {}
    for s in spans:
        parent = s.parent_span_id if s.parent_span_id in by_id else None
        children.setdefault(parent, []).append(s)
    for group in children.values():
        group.sort(key=lambda s: (s.start_ns, 0 if s.is_pass or s.operation == "execute_tool" else 1,
                                  _ORDER.get(s.stage or "", 99), s.span_id))
    client: list[Row] = []
    server: list[Row] = []
    seen: set[str] = set()

    def visit(span: Span, depth: int, side: str, pass_side: str | None) -> None:
        if span.span_id in seen:  # a malformed store could hold a cycle
            return
        seen.add(span.span_id)
        if span.is_pass:
            side = "server" if span.side == "server" else "client"
        kind = ("pass" if span.is_pass else "tool" if span.operation == "execute_tool"
                else "stage" if span.stage else "span")
        timed = kind != "stage" or stage_time_observed(span.stage, pass_side, span.self_ms)
        (server if side == "server" else client).append(Row(span, depth if side == "client" else 0, kind, timed))
        for child in children.get(span.span_id, ()):
            visit(child, depth + 1, side, span.side if span.is_pass else pass_side)

    for top in children.get(None, ()):
        visit(top, 0, "server" if top.is_pass and top.side == "server" else "client", None)
    texts = tuple((k, str(s.attributes[k])) for s in spans if s.is_pass for k in TEXT_KEYS if s.attributes.get(k))
    return TraceView(trace_id, min(s.start_ns for s in spans), max(s.end_ns for s in spans),
                     tuple(client), tuple(server), texts)


def waterfall_rows(view: TraceView, rows: tuple[Row, ...]) -> list[dict[str, object]]:
    out = []
    for i, r in enumerate(rows):
        s = r.span
        start = (s.start_ns - view.start_ns) / 1e6
        end = max(start, (s.end_ns - view.start_ns) / 1e6)
        # a wait that holds the stage (r.timed False): no solid part, only the faint span, labelled as unseen
        own = s.self_ms if r.timed else 0.0
        phase = s.phase if r.kind == "stage" else ("tool" if r.kind == "tool" else "pass")
        label = f"{i + 1:>2}. {'  ' * min(r.depth, 3)}{r.label}" + ("" if r.timed else " (unseen)")
        out.append({"label": label if len(label) <= 36 else label[:35] + "…", "phase": phase or "pass",
                    "start": round(start, 3), "end": round(end, 3),
                    "self_end": round(start + own, 3) if own is not None else round(end, 3)})
    return out


def boundary_values(row: Row) -> list[tuple[str, str]]:
    """The values a person reads for one span: a stage's boundary values, a pass's summary (and why it failed)."""
    attrs = row.span.attributes
    if row.kind == "pass":
        failed = [("status", f"{row.span.status}: {row.span.status_message}")] if row.span.status_message else []
        return failed + [(k, _fmt(attrs[k])) for k in PASS_KEYS if k in attrs]
    return [(k, _fmt(v)) for k, v in attrs.items() if k not in _SKIP]


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    if isinstance(v, list):
        text = ", ".join(_fmt(x) for x in v[:8])
        return f"[{text}{', …' if len(v) > 8 else ''}] ({len(v)})" if len(v) > 8 else f"[{text}]"
    return str(v)
