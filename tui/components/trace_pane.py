"""The trace view: a header, the time axis, the waterfall and, beside or below it, the stage pane."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.message import Message
from textual.widgets import Static

from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry.stages import PHASES, get_phase
from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui import format as fmt
from llmtrace.tui.components.stage_pane import StagePane
from llmtrace.tui.components.waterfall import Waterfall
from llmtrace.tui.data.records import TraceRecord
from llmtrace.tui.data.store_reader import MAX_TRACE_SPANS, StoreReader
from llmtrace.tui.data.waterfall_model import time_observed
from llmtrace.tui.messages import SpanChosen, StoreProblem

NARROW = 120
NO_TRACE = "No trace open. Pick a pass in the request list (r) or a finding's trace (f), then press enter."


class TracePane(Container):
    class TraceLoaded(Message):
        def __init__(self, trace: TraceRecord, select_span: str | None) -> None:
            super().__init__()
            self.trace = trace
            self.select_span = select_span

    def __init__(self, reader: StoreReader, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.reader = reader
        self.trace_id: str | None = None
        self.trace: TraceRecord | None = None
        self.phases: frozenset[str] = frozenset()

    def compose(self) -> ComposeResult:
        with Vertical(id="trace-main"):
            yield Static(NO_TRACE, id="trace-header")
            yield Static("", id="trace-error")
            yield Static("", id="trace-ruler")
            yield Waterfall(id="waterfall")
        yield StagePane(id="stage-pane")

    @property
    def waterfall(self) -> Waterfall:
        return self.query_one(Waterfall)

    def open(self, trace_id: str, select_span: str | None = None) -> None:
        self.trace_id = trace_id
        self.trace = None  # opening always redraws (and selects ``select_span``), even the same trace
        self.query_one("#trace-header", Static).update(Text(f"loading trace {trace_id} …", style="dim"))
        self._load(trace_id, select_span)

    def reload(self) -> None:
        if self.trace_id is not None:
            row = self.waterfall.current_row()
            self._load(self.trace_id, row.span.span_id if row else None)

    @work(thread=True, exclusive=True, group="trace")
    def _load(self, trace_id: str, select_span: str | None) -> None:
        try:
            trace = self.reader.trace(trace_id)
        except StoreError as exc:
            self.post_message(StoreProblem(str(exc)))
            return
        self.post_message(self.TraceLoaded(trace, select_span))

    @on(TraceLoaded)
    def _loaded(self, message: TraceLoaded) -> None:
        if message.trace.trace_id != self.trace_id:
            return
        old = self.trace
        if old is not None and old.trace_id == message.trace.trace_id and old.spans == message.trace.spans:
            return  # a live-mode reload that found nothing new: keep the view (and the stage pane) still
        trace = self.trace = message.trace
        self.query_one("#trace-header", Static).update(_header(trace, self.phases))
        failure = failure_line(trace)
        error = self.query_one("#trace-error", Static)
        error.update(failure or "")
        error.display = failure is not None
        self.waterfall.show_trace(trace, message.select_span)
        if not trace.spans:
            self.query_one(StagePane).show(None)

    def on_resize(self) -> None:
        # Below NARROW columns the stage pane goes under the waterfall instead of beside it.
        self.set_class(self.size.width < NARROW, "-narrow")

    @on(Waterfall.Redrawn)
    def _update_ruler(self, message: Waterfall.Redrawn) -> None:
        message.stop()
        self.query_one("#trace-ruler", Static).update(self.waterfall.ruler_text())

    def set_phases(self, phases: frozenset[str]) -> None:
        self.phases = phases
        self.waterfall.set_phases(phases)
        if self.trace is not None:
            self.query_one("#trace-header", Static).update(_header(self.trace, phases))

    @on(SpanChosen)
    def _span_chosen(self, message: SpanChosen) -> None:
        message.stop()
        trace = self.trace
        breakdown = trace.breakdown.get(message.span.span_id) if trace is not None else None
        timed = time_observed(message.span, trace) if trace is not None else True
        self.query_one(StagePane).show(message.span, breakdown, timed)


def _header(trace: TraceRecord, phases: frozenset[str]) -> Text:
    if not trace.spans:
        return Text(f"trace {trace.trace_id} has no spans in this store", style="#ffaf5f")
    passes = sum(1 for s in trace.spans if s.is_pass)
    tools = sum(1 for s in trace.spans if s.is_tool)
    stages = sum(1 for s in trace.spans if s.stage and not s.is_tool)
    deploys = sorted({s.deploy for s in trace.spans if s.deploy})
    text = Text("trace ", style="dim")
    text.append(trace.trace_id, style="bold")
    text.append(f"  {fmt.ms((trace.end_ns - trace.start_ns) / 1e6)}", style="bold")
    if phases:  # first, so a narrow terminal still shows that rows are hidden
        order = {p.id: p.order for p in PHASES}
        shown = ", ".join(get_phase(p).title for p in sorted(phases, key=lambda p: order.get(p, 99)))
        text.append(f"  · only {shown} (0: all)", style="bold #ffd75f")
    text.append(f"  · {passes} passes · {tools} tools · {stages} stages", style="")
    if len(trace.spans) >= MAX_TRACE_SPANS:
        text.append(f" (first {MAX_TRACE_SPANS} spans)", style="#ffaf5f")
    text.append(f"  · {fmt.utc_time(trace.start_ns, with_date=True)} UTC", style="dim")
    if deploys:
        text.append(f"  · deploy {', '.join(deploys)}", style="dim")
    return text


def failure_line(trace: TraceRecord) -> Text | None:
    """Why the trace's call failed, under its header (None when no pass failed): the client's message first, the
    one the app saw."""
    failed = [s for s in trace.spans if s.is_pass and s.status == "error"]
    if not failed:
        return None
    first = min(failed, key=lambda s: (s.side == "server", s.start_ns))
    text = Text("failed: ", style="bold #ff5f5f")
    text.append(first.status_message or "no message recorded", style="#ff5f5f")
    kind = first.attributes.get(sc.ERROR_TYPE)
    if kind:
        text.append(f"  (error.type {kind})", style="dim")
    if len(failed) > 1:
        text.append(f"  · {len(failed)} failed passes", style="#ff5f5f")
    return text
