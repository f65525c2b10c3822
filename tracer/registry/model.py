"""The registry's record types: a stage, a phase, a boundary value. The catalogs (``catalog/<phase>.py``,
``pass_values.py``) are tables of these; ``stages.py`` loads and indexes them."""

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
    column: str | None = None  # the requests/passes view column that shows it, where one does
    # which side's value a logical pass (the passes view) takes where the client's and the server's pass spans
    # both carry it: the server's by default (it sees the engine), the client's for what only the app knows
    prefer: Literal["server", "client"] = "server"
    # when the value is written, for one that the ordinary runs of the server, the SDKs and the app helpers
    # do not write (a fault, a foreign span, full capture, ...); empty: every such run writes it
    when: str = ""
    # who writes it, for a value that not every recorder of its stage (``Stage.where``) writes: ("C",) for
    # what only the client middleware knows (the answer's shape, the bytes it read); empty: the stage's where
    by: tuple[Where, ...] = ()
    # a value a writer stores to mean "none" (the engine's -1 for "no token missed"): every typed read
    # (tracer/storage/typed_values.py, the per-stage dataset) shows it as NULL, so no reader meets a sentinel
    none_value: int | None = None
    # a pass value's place in a pass's summary (the values a person reads first for a pass: the report's trace
    # page lists them in this order); 0: not in it
    summary: int = 0

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
    # the symptoms this stage explains, in the symptom table's order: derived from the symptom rows
    # (``Symptom.stages``) when ``registry/stages.py`` loads the catalog; a catalog entry leaves it empty
    symptoms: tuple[str, ...] = ()
    # the part of the time to first token this stage's time before the first token counts in (the
    # ``ttft_breakdown`` view's component: queue, batching, intake, routing, cache_lookup, prefill, first_token);
    # empty: none, its time is "other"
    ttft_part: str = ""

    def value(self, name: str) -> BoundaryValue | None:
        for v in self.values:
            if v.name == name:
                return v
        return None


def V(name: str, type_: ValueType, unit: str, meaning: str, *, semconv: bool = False,
      column: str | None = None, prefer: Literal["server", "client"] = "server", when: str = "",
      by: tuple[Where, ...] = (), none_value: int | None = None, summary: int = 0) -> BoundaryValue:
    """Short constructor so the catalog reads as a table."""
    return BoundaryValue(name, type_, unit, meaning, semconv, column, prefer, when, by, none_value, summary)
