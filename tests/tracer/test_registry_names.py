"""The generated name constants (tracer/registry/names.py, stage_ids.py) match the registry, and the emitters
spell span value names and stage ids through them, never as string literals (issue 15: declared once).

Adding a value stays one catalog edit plus ``python -m llmtrace.tracer.registry.names_gen``; forgetting the
second step fails ``test_generated_files_are_current``, and a misspelt constant is an AttributeError (and a
mypy error) instead of a silent new attribute on a span."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llmtrace.tracer.registry import names, names_gen, semconv, stage_ids
from llmtrace.tracer.registry.stages import DECLARED, PASS_VALUE_FAMILIES, STAGES

ROOT = Path(__file__).resolve().parents[2]

# The emitters held to the rule below (every .py file of these folders, new ones too).
EMITTER_GLOBS = ("backend/engine/*.py", "backend/generation/*.py", "backend/server/*.py", "adapters/*/*.py",
                 "tracer/record/*.py", "tracer/reading/*.py", "tracer/collect/otlp_mapping.py", "tracer/collect/otlp_segments.py")
EMITTERS = sorted(str(p.relative_to(ROOT)) for g in EMITTER_GLOBS for p in ROOT.glob(g))
# Whole-string literals in the llmtrace./gen_ai. namespaces that are not span value names.
NOT_VALUE_NAMES = {
    "llmtrace.", "gen_ai.",  # the namespaces themselves (strict mode checks names under them)
    "llmtrace.serve", "llmtrace.engine",  # logger and tracer names
}
# The OpenTelemetry names outside the registry's values (the service name, the error type, the HTTP status):
# one constant each in semconv.py, spelt through it as the declared names are through names.py.
SEMCONV_NAMES = frozenset(v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str))
# Files that read other instrumentations' spans: their undeclared gen_ai.* literals are the senders'
# vocabulary (gen_ai.usage.prompt_tokens, gen_ai.prompt.0.content, ...), not names llmtrace writes.
FOREIGN_READERS = ("tracer/collect/otlp_mapping.py", "tracer/collect/otlp_segments.py")


def _constants(module: object) -> dict[str, str]:
    return {k: v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}


def test_generated_files_are_current() -> None:
    for path, text in names_gen.render().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run `{names_gen.COMMAND}` and commit the result")


def test_every_declared_name_and_stage_has_one_constant() -> None:
    values = _constants(names)
    assert sorted(values.values()) == sorted({*DECLARED, *(p for p, _ in PASS_VALUE_FAMILIES)})
    assert names.PREFIX_HIT_TOKENS == "llmtrace.prefix.hit_tokens"
    assert names.GEN_AI_USAGE_INPUT_TOKENS == "gen_ai.usage.input_tokens"
    assert names.USAGE_RAW_PREFIX == "llmtrace.usage.raw."
    assert list(_constants(stage_ids).values()) == [s.id for s in STAGES]
    assert stage_ids.CACHE_PREFIX_MATCH == "cache.prefix_match"


def test_clashing_names_are_settled_deterministically_or_refused() -> None:
    entry = names_gen._Entry
    settled = names_gen.constant_names([entry("llmtrace.gen_ai.x", "", ""), entry("gen_ai.x", "", ""),
                                        entry("llmtrace.y", "", "")])
    assert settled == {"llmtrace.gen_ai.x": "LLMTRACE_GEN_AI_X", "gen_ai.x": "GEN_AI_X", "llmtrace.y": "Y"}
    reordered = names_gen.constant_names([entry("gen_ai.x", "", ""), entry("llmtrace.gen_ai.x", "", "")])
    assert reordered["llmtrace.gen_ai.x"] == "LLMTRACE_GEN_AI_X"
    with pytest.raises(ValueError, match="both make the constant"):
        names_gen.constant_names([entry("llmtrace.a_b", "", ""), entry("llmtrace.a.b", "", "")])
    with pytest.raises(ValueError, match="no Python identifier"):
        names_gen.constant_names([entry("llmtrace.9lives", "", "")])


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def literal_names(source: str, *, foreign_reader: bool = False) -> list[tuple[int, str]]:
    """(line, text) of each string literal in ``source`` that spells a value name or a stage id: a declared
    name, one of semconv.py's, any other ``llmtrace.*`` name, an undeclared ``gen_ai.*`` one outside the
    foreign readers, a stage id, or an f-string that starts with one of these namespaces."""
    stage_set = {s.id for s in STAGES}
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and str(head.value).startswith(("llmtrace.", "gen_ai.")):
                found.append((node.lineno, f"f-string {head.value}..."))
            skip.update(id(v) for v in node.values)
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skip:
            continue
        text = node.value
        if text in NOT_VALUE_NAMES:
            continue
        name_shaped = " " not in text
        ours = name_shaped and text.startswith("llmtrace.")
        gen_ai = name_shaped and text.startswith("gen_ai.") and not (foreign_reader and text not in DECLARED)
        if text in DECLARED or text in SEMCONV_NAMES or text in stage_set or ours or gen_ai:
            found.append((node.lineno, text))
    return sorted(found)


def test_the_rule_finds_literals() -> None:
    src = ('"""Writes llmtrace.prefix.hit_tokens."""\nA = {"llmtrace.prefix.hit_tokens": 1}\n'
           'B = "cache.prefix_match"\nC = f"llmtrace.usage.raw.{A}"\nD = "gen_ai.usage.prompt_tokens"\n'
           'E = "llmtrace.typo.name"\nF = "not a name"\nG = "llmtrace.serve"\nH = {"http.response.status_code": 1}\n')
    assert literal_names(src) == [(2, "llmtrace.prefix.hit_tokens"), (3, "cache.prefix_match"),
                                  (4, "f-string llmtrace.usage.raw...."), (5, "gen_ai.usage.prompt_tokens"),
                                  (6, "llmtrace.typo.name"), (9, "http.response.status_code")]
    assert (5, "gen_ai.usage.prompt_tokens") not in literal_names(src, foreign_reader=True)


def test_the_emitters_are_found() -> None:
    assert {"backend/engine/stage_emitter.py", "adapters/middleware/client_stages.py", *FOREIGN_READERS} <= set(EMITTERS)
    assert len(EMITTERS) > 80


@pytest.mark.parametrize("rel", EMITTERS)
def test_emitters_spell_names_through_the_registry(rel: str) -> None:
    source = (ROOT / rel).read_text(encoding="utf-8")
    found = literal_names(source, foreign_reader=rel in FOREIGN_READERS)
    assert not found, f"{rel}: use llmtrace.tracer.registry.names / stage_ids constants, not literals: {found}"
