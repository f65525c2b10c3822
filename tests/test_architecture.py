"""DESIGN.md section 1 as import-linter contracts (pyproject.toml): a wrong arrow fails the tests.

import-linter reads packages from disk, and ours are mapped (tracer/ -> llmtrace.tracer), so the test
lays out the installed shape with symlinks and runs ``lint-imports`` over it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tracer", "adapters", "backend", "analyzers", "tui", "report")


def test_import_contracts_hold(tmp_path: Path) -> None:
    pkg = tmp_path / "llmtrace"
    pkg.mkdir()
    for f in (ROOT / "llmtrace").iterdir():
        if f.suffix == ".py":
            (pkg / f.name).symlink_to(f)
    for folder in FOLDERS:
        (pkg / folder).symlink_to(ROOT / folder)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert r.stdout.count("KEPT") == contracts >= 5, r.stdout[-4000:]  # every contract ran and held
