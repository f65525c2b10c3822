"""Every command in the quick start and the integration pages runs, in order, as a user would run it: the
Python blocks as scripts, the shell lines through the real CLI, against a local `llmtrace serve` standing in
for the provider (its --alias maps the hosted model names onto the tiny model).

`pip install` lines are not run (the test venv already has the project); they are checked instead: the
distribution name and every extra they name exist in pyproject.toml, and the other packages import.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib
from testkit import RunningServer, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["quickstart.md", "integrations/openai.md", "integrations/anthropic.md", "integrations/langchain.md",
         "integrations/litellm.md", "integrations/otel.md"]
BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.S)
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("docs-provider"), "--alias", "gpt-4o-mini=tiny",
                     "--alias", "claude-sonnet-4-5=tiny")
    yield s
    stop_server(s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check_pip(line: str) -> None:
    words = shlex.split(line)[2:]
    for word in words:
        name, _, extras = word.partition("[")
        if name.startswith((".", "/")) or name.endswith(".whl"):  # a checkout or a wheel of this project
            name = PYPROJECT["project"]["name"]
        if name == PYPROJECT["project"]["name"]:
            for extra in extras.rstrip("]").split(","):
                assert extra in PYPROJECT["project"]["optional-dependencies"], f"{line}: no extra {extra!r}"
        else:
            __import__(name.replace("-", "_"))  # the other packages the page names are installable


def _pip_lines(page: str) -> list[str]:
    """The page's ``pip install`` lines (not run: checked, see the module's docstring)."""
    return [line for kind, body in BLOCK.findall((ROOT / "docs" / page).read_text()) if kind == "bash"
            for line in body.strip().splitlines() if line.startswith("pip install ")]


def _run_page(page: str, provider: RunningServer, tmp_path: Path) -> list[str]:
    """Every command of ``page`` in order, in ``tmp_path``; the outputs of the foreground ones."""
    text = (ROOT / "docs" / page).read_text()
    port = str(_free_port())  # pages use the OTLP default 4318; a test never takes a fixed port
    env = {**os.environ, "OPENAI_BASE_URL": provider.base_url + "/v1", "OPENAI_API_KEY": "sk-docs",
           "ANTHROPIC_BASE_URL": provider.base_url, "ANTHROPIC_API_KEY": "sk-docs", "LLMTRACE_STRICT": "0"}
    background: list[subprocess.Popen[bytes]] = []
    outputs: list[str] = []
    try:
        for kind, body in BLOCK.findall(text):
            body = body.replace("4318", port)
            if kind == "python":
                first = body.splitlines()[0]
                name = first[2:].strip() if first.startswith("# ") and first.endswith(".py") else None
                script = tmp_path / (name or "block.py")
                script.write_text(body)
                if name is None:
                    outputs.append(_run([sys.executable, str(script)], tmp_path, env))
                continue
            for line in body.strip().splitlines():
                if line.startswith("pip install "):
                    continue  # checked by the test itself, on the main thread (see _pip_lines)
                words = shlex.split(line.removesuffix("&"))
                if words[0] == "python":
                    cmd = [sys.executable, *words[1:]]
                else:
                    assert words[0] == "llmtrace", line
                    cmd = [sys.executable, "-m", "llmtrace.cli", *words[1:]]
                if line.rstrip().endswith("&"):
                    background.append(subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.DEVNULL))
                    _wait_port(int(port))
                else:
                    outputs.append(_run(cmd, tmp_path, env))
    finally:
        for proc in background:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    return outputs


@pytest.fixture(scope="module")
def page_runs(provider: RunningServer, tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> Iterator[dict[str, cf.Future[list[str]]]]:
    """The selected pages' commands, two pages at a time: each page keeps its order, its own folder and its
    own OTLP port; the pages share only the provider, as users would. A page's commands are one-core Python
    processes (most of their time is imports), so on two cores a second page no longer waits for the first.
    Each test still checks its own page: the future raises what its run raised."""
    selected = [item.callspec.params["page"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "page" in item.callspec.params]
    with cf.ThreadPoolExecutor(2) as pool:
        runs = {page: pool.submit(_run_page, page, provider, tmp_path_factory.mktemp(page.replace("/", "-")))
                for page in dict.fromkeys(selected)}
        yield runs


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_page_runs(page: str, page_runs: dict[str, cf.Future[list[str]]]) -> None:
    # here, on the main thread, not in the page's worker: imported from a worker thread, litellm's import put
    # 19 pydantic UserWarnings into the run's summary; imported here (as before the pages ran in threads), none
    for line in _pip_lines(page):
        _check_pip(line)
    outputs = page_runs[page].result(timeout=900)
    assert outputs, f"{page} has no command to run"
    if page == "quickstart.md":  # the first finding the page promises: the clock at the top of the prompt
        diagnosis = outputs[-2]  # llmtrace diagnose, before the sql line
        print(diagnosis)
        assert "intake.system_prompt" in diagnosis or "cache.prefix_match" in diagnosis, diagnosis
        assert "timestamp" in diagnosis, diagnosis


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, f"{shlex.join(cmd)} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def _wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listened on port {port}")
