"""Messages the explorer's widgets send each other (through the app) instead of calling across."""

from __future__ import annotations

from textual.message import Message

from llmtrace.tui.data.records import SpanRecord


class TraceChosen(Message):
    """Open this trace in the waterfall (and select ``span_id`` there when given)."""

    def __init__(self, trace_id: str, span_id: str | None = None) -> None:
        super().__init__()
        self.trace_id = trace_id
        self.span_id = span_id


class SpanChosen(Message):
    """A span was highlighted in the waterfall: the stage pane should explain it."""

    def __init__(self, span: SpanRecord) -> None:
        super().__init__()
        self.span = span


class ShowTraces(Message):
    """List just these traces in the request table (from a finding)."""

    def __init__(self, trace_ids: tuple[str, ...], label: str) -> None:
        super().__init__()
        self.trace_ids = trace_ids
        self.label = label


class PhaseToggled(Message):
    """The phase bar was clicked."""

    def __init__(self, phase: str | None) -> None:
        super().__init__()
        self.phase = phase


class StoreProblem(Message):
    """A read failed (store missing, corrupt, busy for too long): say so, never crash."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
