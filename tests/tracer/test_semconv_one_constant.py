"""One span name, one constant: a name the registry declares is spelt by ``names.py`` (generated) alone, and
``semconv`` holds only the few names outside the registry, so an emitter cannot reach one name by two
constants (issue 15: emitters mixed ``sc.`` and ``N.`` spellings of the same names)."""

from __future__ import annotations

import ast
from pathlib import Path

from llmtrace.tracer.registry import names, semconv

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("tracer", "adapters", "backend", "analyzers", "tui", "report", "llmtrace")


def _constants(module: object) -> dict[str, str]:
    return {k: v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}


def test_semconv_spells_no_name_the_registry_declares() -> None:
    declared = set(_constants(names).values())
    own = _constants(semconv)
    assert own, "semconv keeps the names outside the registry"
    assert {k: v for k, v in own.items() if v in declared} == {}


def test_every_semconv_use_names_a_constant_it_has() -> None:
    # (an emitter still writing sc.GEN_AI_... would fail on import; this names the file and line at once)
    have = set(_constants(semconv))
    wrong: list[str] = []
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "sc"
                        and node.attr.isupper() and node.attr not in have):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} sc.{node.attr}")
    assert wrong == []
