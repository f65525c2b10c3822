"""The analyzers' first (flat) module paths keep importing after the split into core, cache, symptoms, gate and
diagnose (analyzers/__init__.py, tracer/aliases.py): each old path is the moved module itself, so a user's
``from llmtrace.analyzers.query import Query`` or a patch of ``llmtrace.analyzers.check_cli`` still works."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import llmtrace.analyzers as analyzers

ROOT = Path(__file__).resolve().parents[2]
FIRST = sorted((m, layer) for layer, ms in analyzers._FIRST_PATHS.items() for m in ms)


def test_every_module_of_the_flat_layout_has_its_first_path() -> None:
    # the flat layout's 48 modules: every module under the five packages but the one added since (billing)
    now = {p.stem for p in (ROOT / "analyzers").glob("*/*.py") if p.stem != "__init__"}
    assert {m for m, _ in FIRST} <= now and len(FIRST) == 48


@pytest.mark.parametrize(("old", "layer"), FIRST)
def test_an_old_path_is_the_moved_module(old: str, layer: str) -> None:
    moved = importlib.import_module(f"llmtrace.analyzers.{layer}.{old}")
    assert importlib.import_module(f"llmtrace.analyzers.{old}") is moved
    assert moved.__spec__ is not None and moved.__spec__.name == moved.__name__  # its own spec, not the alias's


def test_a_fresh_process_imports_by_the_old_paths() -> None:
    code = ("from llmtrace.analyzers.query import Query\nfrom llmtrace.analyzers.base import SymptomAnalyzer\n"
            "from llmtrace.analyzers.check_cli import compare\nimport llmtrace.analyzers.core.query as q\n"
            "assert Query is q.Query and compare.__module__ == 'llmtrace.analyzers.gate.check_cli'\n"
            "assert SymptomAnalyzer.__module__ == 'llmtrace.analyzers.core.base'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_name_that_never_was_a_module_is_not_answered() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("llmtrace.analyzers.no_such_module")
