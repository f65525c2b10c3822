"""The stage registry: the one place the 42 stages, their phases and every value a span carries are defined.

Everything else — span validation, the store's views, the analyzers, the TUI, ``llmtrace stages`` and
``docs/stages.md`` — reads from here. The catalog itself lives in ``catalog/``, one module a phase
(``catalog/arrival.py`` ... ``catalog/meters.py``), and ``pass_values.py`` (the pass span's own values);
the record types are in ``model.py``. Which symptoms a stage explains is written in the symptom table
(``symptoms.py``, each row's ``stages``) and filled into the stages here.
"""

from __future__ import annotations

from dataclasses import replace

from llmtrace.tracer.registry.model import PYTHON_TYPES, BoundaryValue, Phase, Stage, V, ValueType, Where
from llmtrace.tracer.registry.semconv import ERROR_TYPE, HTTP_RESPONSE_STATUS_CODE
from llmtrace.tracer.registry.symptoms import SYMPTOMS, Symptom

__all__ = ["PYTHON_TYPES", "BoundaryValue", "Phase", "Stage", "V", "ValueType", "Where"]

# Values every stage span may carry: how much of the pass's wall clock the stage itself spent. A stage span
# can be an envelope (attention runs in every step of a pass, interleaved with the rest), so its duration is
# not its time; ``self_ms`` is, and the views (time_breakdown, ttft_breakdown), the explorer and the docs
# read it. Declared once here, accepted on every stage.
SELF_MS = "llmtrace.stage.self_ms"
TTFT_MS = "llmtrace.stage.ttft_ms"
IDLE = "llmtrace.stage.idle"
COUNTED_IN = "llmtrace.stage.counted_in"
COMMON_VALUES: tuple[BoundaryValue, ...] = (
    BoundaryValue(SELF_MS, "float", "ms", "time this stage itself spent in this pass (exclusive: summed over "
                  "steps, no child or interleaved stage counted); the pass's stages add up to its wall clock"),
    BoundaryValue(TTFT_MS, "float", "ms", "the part of self_ms spent before the first token was sampled"),
    BoundaryValue(IDLE, "bool", "", "true when the stage did nothing in this pass (no MoE, no speculation, "
                  "no eviction): its span has no length"),
    BoundaryValue(COUNTED_IN, "str", "", "the stage whose timed work includes this one's (KV writes happen "
                  "inside attention), when this one reports no time of its own"),
    BoundaryValue("llmtrace.observed", "bool", "", "false when the stage happened where this side cannot see it "
                  "(a hosted provider's forward pass)"),
    BoundaryValue("llmtrace.unobserved_reason", "str", "", "why the stage could not be observed"),
)

PHASES: tuple[Phase, ...] = (
    Phase("arrival", "Arrival", 1, "Everything before the text is read: connection, admission, routing, replica, stream."),
    Phase("intake", "Intake", 2, "Turning the caller's messages into the exact token ids the model will see."),
    Phase("cache", "Cache & reuse", 3, "What prefill may skip because keys and values are already resident."),
    Phase("forward", "Forward pass", 4, "The arithmetic: embeddings, positions, attention, MLP, prefill, decode, batching."),
    Phase("generation", "Generation", 5, "Where scores become words: head, penalties, sampling, constraints, stops, text."),
    Phase("loops", "Loops & tools", 6, "The extra passes an agent makes: tools, fan-out, budgets, compaction."),
    Phase("safety", "Safety & shaping", 7, "Untrusted input, streaming moderation, and acting on the stop reason."),
    Phase("meters", "Meters", 8, "Watching the pipeline: cache accounting and cost, by deploy."),
)


def explained_symptoms(stages: tuple[Stage, ...], symptoms: tuple[Symptom, ...]) -> tuple[Stage, ...]:
    """The stages with their ``symptoms`` filled from the symptom rows (``Symptom.stages``), the one place a
    stage-symptom link is written. A row naming an unknown stage, or a catalog entry spelling its own
    symptoms (a second source that could disagree), is an error."""
    ids = {s.id for s in stages}
    for symptom in symptoms:
        unknown = [sid for sid in symptom.stages if sid not in ids]
        if unknown:
            raise ValueError(f"symptom {symptom.id} names unknown stage(s) {', '.join(unknown)}")
    out: list[Stage] = []
    for stage in stages:
        if stage.symptoms:
            raise ValueError(f"stage {stage.id} lists its symptoms in the catalog; name the stage in each "
                             "symptom's row (tracer/registry/symptoms.py, stages=) instead")
        out.append(replace(stage, symptoms=tuple(sym.id for sym in symptoms if stage.id in sym.stages)))
    return tuple(out)


def _load() -> tuple[Stage, ...]:
    import importlib

    # one catalog module a phase, named by the phase's id, loaded in pipeline order
    stages: tuple[Stage, ...] = ()
    for phase in sorted(PHASES, key=lambda p: p.order):
        stages += importlib.import_module(f"llmtrace.tracer.registry.catalog.{phase.id}").STAGES
    phase_ids = {p.id for p in PHASES}
    seen: set[str] = set()
    for i, stage in enumerate(stages, start=1):
        if stage.number != i:
            raise ValueError(f"stage {stage.id} has number {stage.number}, expected {i}")
        if stage.phase not in phase_ids:
            raise ValueError(f"stage {stage.id} names unknown phase {stage.phase}")
        if stage.id in seen:
            raise ValueError(f"duplicate stage id {stage.id}")
        seen.add(stage.id)
    return explained_symptoms(stages, SYMPTOMS)


STAGES: tuple[Stage, ...] = _load()


def _load_pass() -> tuple[tuple[BoundaryValue, ...], tuple[tuple[str, str], ...], tuple[str, ...]]:
    from llmtrace.tracer.registry.pass_values import (
        PASS_VALUE_FAMILIES,
        PASS_VALUES,
        REQUEST_ROW,
        VIEW_COLUMNS,
    )

    return PASS_VALUES, PASS_VALUE_FAMILIES, view_columns_of(REQUEST_ROW, PASS_VALUES, VIEW_COLUMNS)


def view_columns_of(row: tuple[str, ...], values: tuple[BoundaryValue, ...], view_columns: dict[str, str]) -> tuple[str, ...]:
    """``row`` when each of its names is a column the views document (one of ``view_columns`` or a value's
    ``column``); else ValueError, when the registry loads rather than when a reader's SQL runs."""
    shown = {*view_columns, *(v.column for v in values if v.column)}
    unknown = [c for c in row if c not in shown]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a column of the views (tracer/registry/pass_values.py)")
    return row


PASS_VALUES, PASS_VALUE_FAMILIES, REQUEST_ROW = _load_pass()
# every declared name -> its declaration (the first one wins where a stage and the pass span share a name)
DECLARED: dict[str, BoundaryValue] = {}
for _v in (*PASS_VALUES, *COMMON_VALUES, *(v for s in STAGES for v in s.values)):
    DECLARED.setdefault(_v.name, _v)


# the values a person reads first for a pass (its span carries them), in the registry's summary order
# (BoundaryValue.summary; the deploy is declared with the stage that accounts for it)
PASS_SUMMARY: tuple[str, ...] = tuple(v.name for v in sorted((v for v in DECLARED.values() if v.summary),
                                                             key=lambda v: v.summary))
# what a person reads for a pass (the report's trace page): its summary, then how it failed, in OpenTelemetry's
# names (semconv.py)
PASS_KEYS: tuple[str, ...] = (*PASS_SUMMARY, HTTP_RESPONSE_STATUS_CODE, ERROR_TYPE)


def declared_value(name: str) -> BoundaryValue | None:
    """The declaration of a span value name, from any catalog (None: undeclared)."""
    found = DECLARED.get(name)
    if found is not None:
        return found
    for prefix, meaning in PASS_VALUE_FAMILIES:
        if name.startswith(prefix):
            return BoundaryValue(name, "str", "", meaning)
    return None
_BY_ID: dict[str, Stage] = {s.id: s for s in STAGES}
_PHASE_BY_ID: dict[str, Phase] = {p.id: p for p in PHASES}


class UnknownStageError(KeyError):
    """A stage id that is not in the registry."""


def get_stage(stage_id: str) -> Stage:
    try:
        return _BY_ID[stage_id]
    except KeyError:
        raise UnknownStageError(f"unknown stage id {stage_id!r}; see `llmtrace stages`") from None


def is_stage(stage_id: str) -> bool:
    return stage_id in _BY_ID


def get_phase(phase_id: str) -> Phase:
    try:
        return _PHASE_BY_ID[phase_id]
    except KeyError:
        raise KeyError(f"unknown phase {phase_id!r}; one of {', '.join(_PHASE_BY_ID)}") from None


def stages_in_phase(phase_id: str) -> tuple[Stage, ...]:
    get_phase(phase_id)
    return tuple(s for s in STAGES if s.phase == phase_id)


def stage_order() -> dict[str, int]:
    """Stage id -> pipeline position (1..42); used by views and the waterfall to sort."""
    return {s.id: s.number for s in STAGES}
