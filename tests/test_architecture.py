"""DESIGN.md section 1 as import-linter contracts (pyproject.toml): a wrong arrow fails the tests.

import-linter (grimp) finds a package's modules by walking the folder its root package lives in, and ours
are mapped (tracer/ -> llmtrace.tracer, ...): from the checkout, plain ``lint-imports`` sees llmtrace/ alone
and answers "Module 'llmtrace.tracer' does not exist". So this lays out the installed shape with symlinks
and runs ``lint-imports`` over it; ``python tests/test_architecture.py`` prints its report (what the bare
command would print on an installed tree).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tracer", "adapters", "backend", "analyzers", "tui", "report")


def lint_imports(where: Path, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the installed shape of ``root``, laid out under ``where`` (an empty folder)."""
    pkg = where / "llmtrace"
    pkg.mkdir()
    for f in (root / "llmtrace").iterdir():
        if f.suffix == ".py":
            (pkg / f.name).symlink_to(f)
    for folder in FOLDERS:
        (pkg / folder).symlink_to(root / folder)
    shutil.copy(root / "pyproject.toml", where / "pyproject.toml")
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([str(lint), "--no-cache"], cwd=where, env=env, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold(tmp_path: Path) -> None:
    r = lint_imports(tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert r.stdout.count("KEPT") == contracts >= 5, r.stdout[-4000:]  # every contract ran and held


def _lint_with(tmp_path: Path, folder: str, edits: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over a copy of the checkout whose ``folder`` has ``edits`` (path under it -> text
    appended, a new file when it does not exist)."""
    copy = tmp_path / "src"
    copy.mkdir()
    for f in ("llmtrace", *FOLDERS):
        (copy / f).symlink_to(ROOT / f)
    (copy / folder).unlink()
    shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    for rel, text in edits.items():
        path = copy / folder / rel
        path.write_text((path.read_text() if path.exists() else "") + text)
    layout = tmp_path / "layout"
    layout.mkdir()
    return lint_imports(layout, copy)


def test_an_import_circle_in_the_middleware_breaks_a_contract(tmp_path: Path) -> None:
    # the stage writers read a frozen CallRecord; importing the call back (even for a type) is the circle
    r = _lint_with(tmp_path, "adapters", {
        "middleware/wire.py": "\nfrom llmtrace.adapters.middleware import call as _call  # noqa\n"})
    assert r.returncode != 0 and "the middleware has no import circle BROKEN" in r.stdout, r.stdout[-3000:]


ANALYZER_LAYERS = "inside analyzers: gate on diagnose on symptoms on cache on core BROKEN"


@pytest.mark.parametrize("edit", [
    # the core reading the cache-loss model (inside a function still counts)
    {"core/stats.py": "\ndef _f() -> None:\n    from llmtrace.analyzers.cache import kv_replay  # noqa\n"},
    # a symptom reading the gate (the billed-token weighting both use lives in core/billing.py)
    {"symptoms/cost_after_deploy.py": "\nfrom llmtrace.analyzers.gate import baseline as _b  # noqa\n"},
    # a module beside the layers, which no arrow would place
    {"helpers.py": "X = 1\n"},
], ids=["core-imports-cache", "symptom-imports-gate", "module-beside-the-layers"])
def test_an_upward_import_in_the_analyzers_breaks_a_contract(tmp_path: Path, edit: dict[str, str]) -> None:
    r = _lint_with(tmp_path, "analyzers", edit)
    assert r.returncode != 0 and ANALYZER_LAYERS in r.stdout, r.stdout[-3000:]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        r = lint_imports(Path(d))
    print(r.stdout + r.stderr, end="")
    sys.exit(r.returncode)
