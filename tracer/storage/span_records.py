"""One span record and one decoder for every reader that shows a trace's spans (the explorer's waterfall and
stage pane, the report's trace pages): the same columns read in the same order, the attributes' JSON decoded
once, the same questions asked of a span (is it a pass, a tool call, which side, its own time)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.stages import SELF_MS
from llmtrace.tracer.storage.views import PASS_OPERATION_NAMES

TOOL_OPERATION = "execute_tool"

# The span columns a record is read from, in the record's field order; the attributes' JSON text comes last.
SPAN_RECORD_COLUMNS = ("span_id, parent_span_id, name, operation, stage, phase, service, deploy, start_ns, end_ns, "
                       "status, status_message, CAST(attributes AS VARCHAR)")


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span of a trace with its attributes decoded (a frozen copy: never a live connection or cursor)."""

    span_id: str
    parent_span_id: str | None
    name: str
    operation: str | None
    stage: str | None
    phase: str | None
    service: str | None
    deploy: str | None
    start_ns: int
    end_ns: int
    status: str | None
    status_message: str | None = None  # why the span ended in error (scrubbed when it was stored)
    attributes: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def duration_ms(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e6

    @property
    def self_ms(self) -> float | None:
        """The stage's own time where its span records it (the registry's common ``self_ms`` value)."""
        v = self.attributes.get(SELF_MS)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def is_pass(self) -> bool:
        return self.operation in PASS_OPERATION_NAMES

    @property
    def is_tool(self) -> bool:
        return self.operation == TOOL_OPERATION

    @property
    def side(self) -> str | None:
        v = self.attributes.get(N.SIDE)
        return str(v) if v is not None else None


def decode_attributes(text: str | None) -> dict[str, object]:
    """A span's attributes from their stored JSON text; empty for none or what is not a JSON object."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def span_record(row: tuple[Any, ...] | list[Any], clean: Callable[[Any], Any] = lambda v: v) -> SpanRecord:
    """A row read with SPAN_RECORD_COLUMNS as a record; ``clean`` is applied to every value, the decoded
    attributes included (the explorer escapes terminal control characters with it)."""
    sid, parent, name, op, stage, phase, service, deploy, start, end, status, message = map(clean, row[:12])
    return SpanRecord(sid, parent, name, op, stage, phase, service, deploy, start, end, status, message,
                      MappingProxyType(clean(decode_attributes(row[12]))))
