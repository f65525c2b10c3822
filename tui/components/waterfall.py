"""The waterfall: every pass of a trace and its stage spans on one time axis, coloured by phase."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.stages import IDLE
from llmtrace.tui import format as fmt
from llmtrace.tui.data.records import TraceRecord
from llmtrace.tui.data.waterfall_model import WaterfallRow, build_rows, own_ms
from llmtrace.tui.keymap import bindings
from llmtrace.tui.messages import SpanChosen
from llmtrace.tui.theme import OTHER_COLOUR, PASS_COLOUR, phase_colour

DURATION_WIDTH = 8
GLYPH = {"pass": "━", "stage": "█", "tool": "▓", "span": "─"}


def geometry(width: int) -> tuple[int, int]:
    """(label columns, bar columns) for a waterfall ``width`` columns wide."""
    label = max(16, min(44, int(width * 0.36)))
    bar = max(8, width - label - DURATION_WIDTH - 1)
    return label, bar


def ruler(width: int, total_ns: int) -> Text:
    """The time axis over the bar columns: 0 at the left, ticks at quarters, the total at the right."""
    label_w, bar_w = geometry(width)
    line = [" "] * bar_w
    marks: list[tuple[int, str]] = []
    for q in range(0, 5):
        col = min(bar_w - 1, round(q * (bar_w - 1) / 4))
        marks.append((col, fmt.ms(total_ns * q / 4 / 1e6) if q else "0"))
    for col, text in marks:
        start = col if col + len(text) <= bar_w else bar_w - len(text)
        start = max(0, start)
        if all(c == " " for c in line[start : start + len(text)]):
            line[start : start + len(text)] = list(text)
    out = Text(" " * label_w, style="dim")
    out.append("".join(line), style="dim")
    out.append(" " * (DURATION_WIDTH + 1))
    return out


def row_text(row: WaterfallRow, t0: int, total_ns: int, width: int) -> Text:
    label_w, bar_w = geometry(width)
    span = row.span
    colour = PASS_COLOUR if row.kind == "pass" else (phase_colour(row.phase) if row.kind != "span" else OTHER_COLOUR)
    indent = " " * min(row.depth, 8)
    label = indent + row.label
    if len(label) > label_w - 1:
        label = label[: label_w - 2] + "…"
    text = Text()
    text.append(label.ljust(label_w), style=f"bold {PASS_COLOUR}" if row.kind == "pass" else colour)
    scale = bar_w / max(1, total_ns)
    start = min(bar_w - 1, max(0, int((span.start_ns - t0) * scale)))
    end = min(bar_w, max(start + 1, round((span.end_ns - t0) * scale)))
    # a stage not seen at all, or one whose span is only a wait that holds it (a client's stream set-up up to
    # the first byte): dotted and faint, never a solid bar of the wait's length
    unobserved = span.attributes.get(N.OBSERVED) is False or not row.time_observed
    glyph = "·" if unobserved else GLYPH[row.kind]
    bar_style = "dim" if unobserved else (f"bold {colour}" if row.kind == "pass" else colour)
    if span.status == "error":
        bar_style = "bold #ff5f5f"
    idle = row.kind == "stage" and span.attributes.get(IDLE) is True
    own = own_ms(span) if row.kind == "stage" else None
    text.append(" " * start)
    if idle:
        text.append("·", style="dim")
        end = start + 1
    elif own is not None and own < span.duration_ms:
        # an envelope (the stage ran interleaved with others across the pass): its own time solid at the
        # start, the rest of the envelope faint, so no stage looks bigger than it was
        solid = min(end - start, max(1 if own > 0 else 0, round(own * 1e6 * scale)))
        text.append(glyph * solid, style=bar_style)
        text.append("░" * (end - start - solid), style=f"dim {colour}")
    else:
        text.append(glyph * (end - start), style=bar_style)
    text.append(" " * (bar_w - end))
    if unobserved:
        dur = "unseen"
    elif idle:
        dur = "idle"
    else:
        dur = fmt.ms(own if own is not None else span.duration_ms)
    text.append(" " + dur.rjust(DURATION_WIDTH), style="dim" if row.kind == "stage" else "")
    return text


class Waterfall(OptionList):
    """One option per span row; highlighting a row asks the stage pane to explain it."""

    BINDINGS = bindings("waterfall")

    class Redrawn(Message):
        """Rows were laid out again (new trace, new width): the time axis above must follow."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, compact=True)
        self.trace: TraceRecord | None = None
        self.phases: frozenset[str] = frozenset()
        self.rows: list[WaterfallRow] = []
        self._drawn_width = 0

    def show_trace(self, trace: TraceRecord | None, select_span: str | None = None) -> None:
        self.trace = trace
        self._redraw(select_span)
        # The tab may have just been shown and not laid out yet: draw again at the settled width.
        self.call_after_refresh(self._redraw_if_resized, select_span)

    def _redraw_if_resized(self, select_span: str | None) -> None:
        if self.usable_width() != self._drawn_width:
            current = self.current_row()
            self._redraw(current.span.span_id if current else select_span)

    def set_phases(self, phases: frozenset[str]) -> None:
        self.phases = phases
        current = self.current_row()
        self._redraw(current.span.span_id if current else None)

    def usable_width(self) -> int:
        width = self.scrollable_content_region.width or self.size.width or 80
        return max(30, width)

    def on_resize(self) -> None:
        if self.usable_width() != self._drawn_width:
            current = self.current_row()
            self._redraw(current.span.span_id if current else None)

    def _redraw(self, select_span: str | None = None) -> None:
        trace = self.trace
        self.rows = build_rows(trace, self.phases or None) if trace else []
        width = self._drawn_width = self.usable_width()
        options: list[Option] = []
        if trace is not None and self.rows:
            t0 = trace.start_ns
            total = max(1, trace.end_ns - t0)
            options = [Option(row_text(r, t0, total, width), id=r.span.span_id) for r in self.rows]
        self.set_options(options)
        self.post_message(self.Redrawn())
        if not self.rows:
            return
        index = 0
        if select_span is not None:
            index = next((i for i, r in enumerate(self.rows) if r.span.span_id == select_span), 0)
        self.highlighted = index

    def current_row(self) -> WaterfallRow | None:
        i = self.highlighted
        return self.rows[i] if i is not None and 0 <= i < len(self.rows) else None

    def ruler_text(self) -> Text:
        if self.trace is None:
            return Text("")
        return ruler(self.usable_width(), max(1, self.trace.end_ns - self.trace.start_ns))

    def action_explain(self) -> None:
        row = self.current_row()
        if row is not None:
            self.post_message(SpanChosen(row.span))

    @on(OptionList.OptionHighlighted)
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        row = self.current_row()
        if row is not None:
            self.post_message(SpanChosen(row.span))

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_explain()
