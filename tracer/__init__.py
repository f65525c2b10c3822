"""llmtrace.tracer — the floor: stage registry, recording API, exporters, the DuckDB store.

Sub-packages by concern: ``registry`` (the stages and every value a span may carry), ``record`` (the in-app
recording path: spans, capture mode, exporter, health counters), ``reading`` (prompt, answer and
conversation reading that the client middleware and the collector share), ``storage`` (the store, its views, SQL
dialects, ClickHouse, retention), ``collect`` (the OTLP receiver and its mapping) and ``cli`` (the
tracer's commands). This module is the small public API over them.

It imports nothing from the other llmtrace packages, and never torch or textual.
"""

from llmtrace.tracer.record import capture, health, recording
from llmtrace.tracer.record.lifecycle import force_flush, init, shutdown
from llmtrace.tracer.record.recording import (
    PassSpan,
    StageSpan,
    mark_unobserved,
    now_ns,
    record_stage,
    stage,
    start_pass,
    tool_span,
)
from llmtrace.tracer.registry import semconv
from llmtrace.tracer.registry.stages import (
    PHASES,
    STAGES,
    BoundaryValue,
    Phase,
    Stage,
    UnknownStageError,
    get_phase,
    get_stage,
)
from llmtrace.tracer.registry.symptoms import SYMPTOMS, Symptom, get_symptom, search_symptoms

__all__ = [
    "PHASES", "STAGES", "SYMPTOMS", "BoundaryValue", "PassSpan", "Phase", "Stage", "StageSpan", "Symptom",
    "UnknownStageError", "capture", "force_flush", "get_phase", "get_stage", "get_symptom", "health", "init",
    "mark_unobserved", "now_ns", "record_stage", "recording", "search_symptoms", "semconv", "shutdown",
    "stage", "start_pass", "tool_span",
]
