"""Helpers the report's tests share (a module of its own: every test folder has a ``conftest``, and in a
whole-suite run ``from conftest import`` finds whichever was imported last)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

from llmtrace.cli import main


def write_report(args: list[str]) -> int:
    """Run the ``llmtrace`` CLI in this process (``report``, ``check``, ``export``): its exit status."""
    return main(args)


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def diagnose(db: Path) -> list[dict[str, object]]:
    """What ``llmtrace diagnose --json`` finds in a store."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return json.loads(buf.getvalue())["findings"]
