"""The read side speaks the registry too (issue 34): the store, the report, the explorer and the analyzers name
stages and values through the generated constants (tracer/registry/names.py, stage_ids.py), as the emitters do
(test_registry_names.py, whose rule this applies), and take each value's type from the registry instead of
restating it beside the name (tracer/storage/typed_values.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_registry_names import ROOT, literal_names  # noqa: E402

READER_GLOBS = ("tracer/storage/*.py", "report/**/*.py", "tui/**/*.py", "analyzers/**/*.py")
READERS = sorted({str(p.relative_to(ROOT)) for g in READER_GLOBS for p in ROOT.glob(g)})
VALUE_TYPES = frozenset({"str", "int", "float", "bool", "str[]", "int[]", "float[]"})


def _names_a_value(node: ast.expr) -> bool:
    """A registry constant (``N.PREFILL_MS``, ``SELF_MS``) or a name spelt out (``"llmtrace.x"``)."""
    if isinstance(node, ast.Attribute) or isinstance(node, ast.Name) and node.id.isupper():
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.startswith(("llmtrace.", "gen_ai."))


def restated_types(source: str) -> list[tuple[int, str]]:
    """(line, text) of each value type spelt beside a value in ``source``: a pair ``(name, "int")`` (the old
    ``{alias: (name, type)}`` read) or ``attr(name, "int")``. The registry declares every value's type; the
    read API (tracer/storage/typed_values.py) takes it from there."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            name, typ = node.elts
            if isinstance(typ, ast.Constant) and typ.value in VALUE_TYPES and _names_a_value(name):
                found.append((node.lineno, f"({ast.unparse(name)}, {typ.value!r})"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "attr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in VALUE_TYPES:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_type_rule_finds_restated_types() -> None:
    src = ('A = {"x": (N.PREFILL_MS, "float")}\nB = attr(N.BLOCKS_BLOCK_SIZE, "int")\nC = attr(N.PROMPT_TEXT)\n'
           'D = ("trace_id", "VARCHAR")\nE = ("int", "float")\nF = (unit, "str")\n')
    assert restated_types(src) == [(1, "(N.PREFILL_MS, 'float')"), (2, "attr(N.BLOCKS_BLOCK_SIZE, 'int')")]


def test_the_readers_are_found() -> None:
    assert {"analyzers/core/query.py", "analyzers/cache/cache_loss.py", "report/data.py", "tui/data/store_reader.py",
            "tracer/storage/views.py", "tracer/storage/time_views.py"} <= set(READERS)
    # the symptom analyzers too, wherever under analyzers/ they land (the last seven moved onto the constants
    # held an allowlist here until issue 34)
    symptoms = {"untrusted_input", "early_end", "intake_transform", "degrades_under_traffic", "slow_first_token",
                "different_answer", "slow_stream", "truncation", "broken_json", "session_forgets"}
    assert symptoms <= {Path(r).stem for r in READERS if r.startswith("analyzers/")}


@pytest.mark.parametrize("rel", READERS)
def test_readers_spell_names_through_the_registry(rel: str) -> None:
    source = (ROOT / rel).read_text(encoding="utf-8")
    found = literal_names(source)
    assert not found, f"{rel}: use llmtrace.tracer.registry.names / stage_ids constants, not literals: {found}"
    typed = restated_types(source)
    assert not typed, f"{rel}: the registry declares each value's type; name the value only: {typed}"


if __name__ == "__main__":  # the work left: `python tests/tracer/test_reader_names.py`
    for rel in READERS:
        text = (ROOT / rel).read_text(encoding="utf-8")
        n_lit, n_typ = len(literal_names(text)), len(restated_types(text))
        if n_lit or n_typ:
            print(f"{rel}: {n_lit} name/stage literals, {n_typ} restated types")
