"""What a mapping gives back: the span's labels and attributes, and the stage rows it derives."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry.stages import get_stage


@dataclass(slots=True)
class ExtraRow:
    """A stage span synthesized from a foreign span's numbers (a child of that span)."""

    span_id: str
    stage: str
    phase: str
    start_ns: int
    end_ns: int
    attributes: dict[str, object]


@dataclass(slots=True)
class Mapped:
    operation: str | None
    stage: str | None
    phase: str | None
    attributes: dict[str, object]
    extra: list[ExtraRow] = field(default_factory=list)


def child_id(span_hex: str, stage_id: str) -> str:
    """A synthesized row's span id: the same for the same span and stage, so a span sent twice (an exporter's
    retry) gives the same rows."""
    return hashlib.blake2b(f"{span_hex}/{stage_id}".encode(), digest_size=8).hexdigest()


def stage_row(span_hex: str, stage_id: str, start: int, end: int, values: dict[str, object]) -> ExtraRow:
    phase = get_stage(stage_id).phase
    attrs = {sc.LLMTRACE_STAGE: stage_id, sc.LLMTRACE_PHASE: phase, **values}
    return ExtraRow(child_id(span_hex, stage_id), stage_id, phase, start, end, attrs)


def as_stage(stage_id: str, attrs: dict[str, object], operation: str | None = None) -> Mapped:
    """The span itself is the stage (an engine's own phase span): labelled with it, values added."""
    phase = get_stage(stage_id).phase
    attrs[sc.LLMTRACE_STAGE] = stage_id
    attrs[sc.LLMTRACE_PHASE] = phase
    return Mapped(operation, stage_id, phase, attrs)
