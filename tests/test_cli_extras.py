"""Commands that need an optional extra say which one, in one line, instead of a traceback.

The light core is simulated the way Python itself reports a missing package: the module's entry in
``sys.modules`` is None, so ``import openai`` raises ModuleNotFoundError(name='openai') exactly as in a venv
that never installed it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    ("openai", ["demo", "--model", "tiny"], "llmtrace-stages[clients]"),
    ("torch", ["serve", "--model", "tiny", "--port", "0"], "llmtrace-stages[backend]"),
    ("torch", ["demo", "--model", "tiny"], "llmtrace-stages[backend]"),
]


@pytest.mark.parametrize(("blocked", "argv", "install"), CASES)
def test_missing_extra_is_one_line_naming_it(tmp_path, blocked: str, argv: list[str], install: str) -> None:
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from llmtrace.cli import main\n"
            f"sys.exit(main({argv + ['--db', str(tmp_path / 's.duckdb')] if argv[0] == 'demo' else argv!r}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    assert f"needs {blocked}" in out.stderr and f"pip install '{install}'" in out.stderr, out.stderr
