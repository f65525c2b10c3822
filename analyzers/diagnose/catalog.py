"""Symptom id -> analyzer, loaded from the symptom registry (``tracer/registry/symptoms.py``).

Each symptom row is answered by the module named after it, ``analyzers/symptoms/<symptom id>.py``, which defines
one class whose ``symptom`` is that id; the class is built with no arguments. So a new analyzer is its module
plus its row in the registry: there is no hand-kept import list to forget.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, cast

from llmtrace.analyzers import symptoms as symptom_modules

if TYPE_CHECKING:
    from llmtrace.analyzers.core.base import Analyzer


def analyzer_for(symptom: str) -> Analyzer:
    """The analyzer of one symptom: the class of ``analyzers/symptoms/<symptom>.py`` whose ``symptom`` is that
    id."""
    name = f"{symptom_modules.__name__}.{symptom}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise  # the module exists and one of its own imports failed: that error is the one to see
        raise ValueError(f"symptom {symptom!r} has no analyzer: write analyzers/symptoms/{symptom}.py") from None
    found = [c for c in vars(module).values()
             if inspect.isclass(c) and c.__module__ == module.__name__ and getattr(c, "symptom", None) == symptom]
    if len(found) != 1:
        raise ValueError(f"analyzers/symptoms/{symptom}.py must define exactly one class with "
                         f"symptom = {symptom!r}, found {len(found)}")
    return cast("Analyzer", found[0]())  # the class is the module's; the Protocol is what the run calls


def build_analyzers() -> dict[str, Analyzer]:
    """Every symptom's analyzer, in the symptom table's order."""
    from llmtrace.tracer.registry.symptoms import SYMPTOMS

    return {s.id: analyzer_for(s.id) for s in SYMPTOMS}
