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


def _main_without(blocked: str, argv: list[str], cwd) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from llmtrace.cli import main\n"
            f"sys.exit(main({argv!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("blocked", ["torch", "uvicorn"])
def test_serve_help_without_the_backend(tmp_path, blocked: str) -> None:
    """--help is argparse alone: it prints every option and ends with the install line; running the command
    prints that line only and exits 2 (a usage error), before anything of the server is imported."""
    helped = _main_without(blocked, ["serve", "--help"], tmp_path)
    assert helped.returncode == 0 and helped.stderr == "", helped.stderr
    assert "--replicas" in helped.stdout and "--alias NAME=MODEL" in helped.stdout
    last = helped.stdout.rstrip("\n").split("\n")[-1]
    assert f"needs {blocked}" in last and "pip install 'llmtrace-stages[backend]'" in last, helped.stdout
    ran = _main_without(blocked, ["serve", "--model", "tiny", "--port", "0"], tmp_path)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.strip().count("\n") == 0 and "pip install 'llmtrace-stages[backend]'" in ran.stderr, ran.stderr


def test_serve_help_with_the_backend_names_no_extra(tmp_path) -> None:
    helped = subprocess.run([sys.executable, "-m", "llmtrace.cli", "serve", "--help"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert helped.returncode == 0 and "--replicas" in helped.stdout
    assert "pip install" not in helped.stdout


def test_version_names_the_distribution(tmp_path) -> None:
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "--version"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0
    assert out.stdout == f"llmtrace-stages {version('llmtrace-stages')}\n"
