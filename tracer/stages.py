"""The stage registry: the one place the 42 stages, their phases and boundary values are defined.

Everything else — span validation, the store's views, the analyzers, the TUI, ``llmtrace stages`` and
``docs/stages.md`` — reads from here. The catalog itself lives in ``catalog_front.py`` (Arrival to
Forward pass) and ``catalog_back.py`` (Generation to Meters) so each file stays readable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ValueType = Literal["str", "int", "float", "bool", "str[]", "int[]", "float[]"]
Where = Literal["B", "C", "A"]

PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
}


@dataclass(frozen=True, slots=True)
class BoundaryValue:
    """One number (or label) a stage leaves behind that says whether it is the one hurting you."""

    name: str
    type: ValueType
    unit: str
    meaning: str
    semconv: bool = False  # True when the name is an OpenTelemetry GenAI semconv (v1.41) attribute

    def accepts(self, value: object) -> bool:
        if self.type.endswith("[]"):
            return isinstance(value, (list, tuple)) and all(_scalar_ok(self.type[:-2], v) for v in value)
        return _scalar_ok(self.type, value)


def _scalar_ok(type_: str, value: object) -> bool:
    if isinstance(value, bool):
        return type_ == "bool"
    return isinstance(value, PYTHON_TYPES[type_])


@dataclass(frozen=True, slots=True)
class Phase:
    id: str
    title: str
    order: int
    summary: str


@dataclass(frozen=True, slots=True)
class Stage:
    number: int
    id: str
    phase: str
    title: str
    description: str
    goes_wrong: str
    where: tuple[Where, ...]
    values: tuple[BoundaryValue, ...]
    symptoms: tuple[str, ...] = ()

    def value(self, name: str) -> BoundaryValue | None:
        for v in self.values:
            if v.name == name:
                return v
        return None


def V(name: str, type_: ValueType, unit: str, meaning: str, *, semconv: bool = False) -> BoundaryValue:
    """Short constructor so the catalog reads as a table."""
    return BoundaryValue(name, type_, unit, meaning, semconv)


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


def _load() -> tuple[Stage, ...]:
    from .catalog_back import BACK_STAGES
    from .catalog_front import FRONT_STAGES

    stages = FRONT_STAGES + BACK_STAGES
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
    return stages


STAGES: tuple[Stage, ...] = _load()
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
