"""llmtrace.tracer — the floor: stage registry, recording API, exporters, the DuckDB store.

It imports nothing from the other llmtrace packages, and never torch or textual.
"""

from . import capture, health, recording, semconv
from .recording import (
    PassSpan,
    StageSpan,
    mark_unobserved,
    now_ns,
    record_stage,
    stage,
    start_pass,
    tool_span,
)
from .setup import force_flush, init, shutdown
from .stages import PHASES, STAGES, BoundaryValue, Phase, Stage, UnknownStageError, get_phase, get_stage
from .symptoms import SYMPTOMS, Symptom, get_symptom, search_symptoms

__all__ = [
    "PHASES", "STAGES", "SYMPTOMS", "BoundaryValue", "PassSpan", "Phase", "Stage", "StageSpan", "Symptom",
    "UnknownStageError", "capture", "force_flush", "get_phase", "get_stage", "get_symptom", "health", "init",
    "mark_unobserved", "now_ns", "record_stage", "recording", "search_symptoms", "semconv", "shutdown",
    "stage", "start_pass", "tool_span",
]
