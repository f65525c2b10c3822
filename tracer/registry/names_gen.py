"""Writes ``names.py`` (a constant per declared span value name) and ``stage_ids.py`` (a constant per stage
id) from the registry, so an emitter spells a name once, through the registry, and a wrong one is an
AttributeError or a mypy error instead of a silent new attribute.

Run after adding or renaming a value or a stage: ``python -m llmtrace.tracer.registry.names_gen``.
``tests/tracer/test_registry_names.py`` renders both files in memory and fails when a committed one is stale.

Naming: a value's constant is its name upper-cased with dots as underscores, ``llmtrace.`` dropped
(``llmtrace.prefix.hit_tokens`` -> ``PREFIX_HIT_TOKENS``, ``gen_ai.usage.input_tokens`` ->
``GEN_AI_USAGE_INPUT_TOKENS``); a name family (``PASS_VALUE_FAMILIES``) gets ``<FAMILY>_PREFIX``. Where two
names would meet in one constant, every ``llmtrace.`` name of the clash keeps its ``LLMTRACE_`` prefix; a
clash that this does not settle is an error to resolve in the catalog (rename one), never a silent choice.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llmtrace.tracer.registry.model import BoundaryValue
from llmtrace.tracer.registry.stages import COMMON_VALUES, PASS_VALUE_FAMILIES, PASS_VALUES, STAGES

HERE = Path(__file__).resolve().parent
COMMAND = "python -m llmtrace.tracer.registry.names_gen"


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str  # the span value name (or family prefix)
    note: str  # trailing comment: type, unit, where declared
    section: str
    family: bool = False


def _short(name: str, *, family: bool, keep_prefix: bool) -> str:
    body = name if keep_prefix else name.removeprefix("llmtrace.")
    ident = body.rstrip(".").replace(".", "_").upper() + ("_PREFIX" if family else "")
    if not ident.isidentifier():  # (a leading digit is no identifier either)
        raise ValueError(f"value name {name!r} makes no Python identifier ({ident!r}); rename it in the catalog")
    return ident


def constant_names(entries: Iterable[_Entry]) -> dict[str, str]:
    """Value name -> constant, clashes settled as the module docstring says (deterministic: no order)."""
    entries = list(entries)
    first: dict[str, list[str]] = {}
    for e in entries:
        first.setdefault(_short(e.name, family=e.family, keep_prefix=False), []).append(e.name)
    clashing = {n for names in first.values() if len(names) > 1 for n in names}
    out: dict[str, str] = {}
    for e in entries:
        keep = e.name in clashing and e.name.startswith("llmtrace.")
        out[e.name] = _short(e.name, family=e.family, keep_prefix=keep)
    seen: dict[str, str] = {}
    for name, const in out.items():
        if const in seen:
            raise ValueError(f"{seen[const]!r} and {name!r} both make the constant {const}; rename one in the catalog")
        seen[const] = name
    return out


def _note(v: BoundaryValue, where: str) -> str:
    unit = f" {v.unit}" if v.unit else ""
    return f"{v.type}{unit}; {where}"


def _entries() -> list[_Entry]:
    out: list[_Entry] = []
    seen: set[str] = set()

    def add(values: Iterable[BoundaryValue], section: str, where: str) -> None:
        for v in values:
            if v.name not in seen:  # a name a stage shares with the pass span is declared by its first home
                seen.add(v.name)
                out.append(_Entry(v.name, _note(v, where), section))

    add(PASS_VALUES, "the pass span (pass_values.py)", "pass span")
    for prefix, _meaning in PASS_VALUE_FAMILIES:
        out.append(_Entry(prefix, "family prefix: the suffix is the provider's own field", "the pass span (pass_values.py)",
                          family=True))
    add(COMMON_VALUES, "every stage span (stages.py COMMON_VALUES)", "every stage")
    for s in STAGES:
        add(s.values, f"stage {s.number} {s.id} (catalog/{s.phase}.py)", s.id)
    return out


def _header(what: str) -> list[str]:
    return [f'"""{what}', "",
            f"GENERATED from the stage registry by ``{COMMAND}``: do not edit by hand;",
            "change the catalog (tracer/registry/catalog/*.py, pass_values.py, stages.py) and run it again.",
            '"""', "", "from __future__ import annotations", "", "from typing import Final", ""]


def render_names() -> str:
    entries = _entries()
    consts = constant_names(entries)
    lines = _header("A constant for every span value name the registry declares (emitters use these, never a literal).")
    section = ""
    for e in entries:
        if e.section != section:
            lines += ([""] if section else []) + [f"# ── {e.section}"]
            section = e.section
        lines.append(f'{consts[e.name]}: Final = "{e.name}"  # {e.note}')
    return "\n".join(lines) + "\n"


def render_stage_ids() -> str:
    lines = _header("A constant for every stage id in the registry, in pipeline order.")
    seen: set[str] = set()
    for s in STAGES:
        const = s.id.replace(".", "_").upper()
        if not const.isidentifier() or const in seen:
            raise ValueError(f"stage id {s.id!r} makes no unique Python identifier ({const!r})")
        seen.add(const)
        lines.append(f'{const}: Final = "{s.id}"  # {s.number}. {s.title}')
    return "\n".join(lines) + "\n"


def render() -> dict[Path, str]:
    """Each generated file's path and the text it must hold."""
    return {HERE / "names.py": render_names(), HERE / "stage_ids.py": render_stage_ids()}


def main() -> int:
    for path, text in render().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
