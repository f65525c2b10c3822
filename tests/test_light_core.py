"""The light core as a user installs it: a wheel built from the tree, ``llmtrace-stages[clients]`` into a clean
venv (no torch, no numpy), then the quick start page exactly as printed against a real ``llmtrace serve``.

The venv gets only what the wheel declares; versions come from the committed lock (as constraints, the same
releases ``make test`` installs), so the run is the same on every machine. ``llmtrace serve`` itself needs
the backend extra, so the page's ``shell`` block (the stand-in provider) runs from the test venv, on the tiny
random model instead of SmolLM2 (as tests/test_docs_commands.py does, for time); everything
the page does after it runs from the light venv: the app with its two lines, ``diagnose``, ``sql`` in every
output mode on a pipe and on a terminal, the explorer's first screen, ``report`` (its missing-extra line,
then the page with ``[report]`` installed).
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from testkit import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "quickstart.md").read_text()
BLOCKS = re.findall(r"```(bash|python|shell)\n(.*?)```", PAGE, re.S)
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]")


@dataclass
class LightVenv:
    root: Path
    wheel: Path
    constraints: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def llmtrace(self) -> Path:
        return self.root / "bin" / "llmtrace"

    def pip_install(self, spec: str) -> None:
        """What ``pip install SPEC`` does, through uv (pip spends minutes resolving on a busy 2-core machine);
        the venv is a plain ``python -m venv`` one, as a user's would be."""
        uv = Path(sys.executable).with_name("uv")
        out = subprocess.run([str(uv), "pip", "install", "--quiet", "--python", str(self.python),
                              "--constraints", str(self.constraints), spec],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]

    def imports(self, module: str) -> bool:
        return subprocess.run([str(self.python), "-c", f"import {module}"], capture_output=True).returncode == 0


def _constraints(dest: Path) -> Path:
    """The lock's pins without their hashes (constraints carry versions; the hashes are make test's check)."""
    pins = [line.split()[0] for line in (ROOT / "requirements" / "test.lock").read_text().splitlines()
            if re.match(r"^[A-Za-z0-9_.\-\[\]]+==", line)]
    dest.write_text("\n".join(pins) + "\n")
    return dest


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LightVenv]:
    tmp = tmp_path_factory.mktemp("light-core")
    src = tmp / "src"  # a copy: a stale build/ folder in the checkout can never leak into the wheel
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
        ".hypothesis", "*.duckdb", "*.duckdb.wal", "results", "tests", "benchmarks"))
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, cwd=tmp)
    (wheel,) = dist.glob("llmtrace_stages-*.whl")
    root = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    yield LightVenv(root, wheel, _constraints(tmp / "constraints.txt"))


def _page_lines(kind: str) -> list[str]:
    return [line for k, body in BLOCKS if k == kind for line in body.strip().splitlines()]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], ok: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert out.returncode == 0, f"{shlex.join(cmd)} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


def _on_a_terminal(cmd: list[str], cwd: Path, env: dict[str, str], until: str, keys: bytes = b"",
                   timeout_s: float = 60.0) -> str:
    """Runs ``cmd`` on a pseudo-terminal (120x40) until its screen shows ``until``; sends ``keys`` then, and
    returns everything it drew with the escape codes taken out."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(cmd, cwd=cwd, env={**env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"},
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""
    sent = False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break  # the program ended and closed its side
                if not chunk:
                    break
                seen += chunk
            text = ANSI.sub("", seen.decode(errors="replace"))
            if not sent and until in text:
                if not keys:
                    break
                os.write(master, keys)
                sent = True
            if proc.poll() is not None and not ready:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        os.close(master)
    return ANSI.sub("", seen.decode(errors="replace"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quickstart_on_the_light_core_as_printed(light: LightVenv, tmp_path: Path) -> None:
    # 1. the page's install line, with the checkout it names replaced by the wheel built from it
    (install,) = [line for line in _page_lines("bash") if line.startswith("pip install ")]
    spec = shlex.split(install)[2]
    assert spec.endswith("[clients]"), install
    light.pip_install(f"{light.wheel}[clients]")
    assert not light.imports("torch"), "the light core pulled in torch"
    assert not light.imports("numpy"), "the light core pulled in numpy, which it does not declare"

    # the CLI's own face without the backend: a version, serve's help and its missing-extra line
    env = {**os.environ, "OPENAI_API_KEY": "sk-quickstart", "LLMTRACE_STRICT": "0", "NO_COLOR": "1"}
    env.pop("OPENAI_BASE_URL", None)
    version = _run([str(light.llmtrace), "--version"], tmp_path, env).stdout
    assert re.fullmatch(r"llmtrace-stages \d+\.\d+\.\d+\S*\n", version), version
    help_text = _run([str(light.llmtrace), "serve", "--help"], tmp_path, env).stdout
    assert "--served-model-name" in help_text and "llmtrace-stages[backend]" in help_text, help_text
    no_backend = _run([str(light.llmtrace), "serve", "--port", "0"], tmp_path, env, ok=False)
    assert no_backend.returncode != 0 and "Traceback" not in no_backend.stderr, no_backend.stderr
    assert "llmtrace-stages[backend]" in no_backend.stderr, no_backend.stderr

    # 2. the stand-in provider, as the page prints it (serve needs torch: it runs from the test venv)
    port = free_port()
    provider: subprocess.Popen[bytes] | None = None
    try:
        for line in _page_lines("shell"):
            if line.startswith("pip install "):
                assert "[backend]" in line, line
                continue
            if line.startswith("export "):
                for pair in shlex.split(line)[1:]:
                    key, _, value = pair.partition("=")
                    env[key] = value.replace("8000", str(port))
                continue
            words = shlex.split(line.removesuffix("&").replace("8000", str(port)))
            assert words[0] == "llmtrace" and words[1] == "serve", line
            serve_log = (tmp_path / "serve.log").open("wb")
            # --model tiny: the page's line serves SmolLM2, which loads and answers in minutes, not seconds,
            # on a busy 2-core CI machine; what this test is about is the light venv's side of the page
            provider = subprocess.Popen([sys.executable, "-m", "llmtrace.cli", *words[1:], "--model", "tiny"],
                                        cwd=tmp_path,
                                        stdout=serve_log, stderr=subprocess.STDOUT, env=env)
        assert provider is not None, "the quick start shows no `llmtrace serve` line"
        assert env.get("OPENAI_BASE_URL", "").endswith(f":{port}/v1"), env.get("OPENAI_BASE_URL")
        _wait_ready(port, provider, tmp_path / "serve.log")

        # 3. the app with its two lines, 4. diagnose, 5. sql: each from the light venv
        (app,) = [body for kind, body in BLOCKS if kind == "python" and body.startswith("# app.py")]
        (tmp_path / "app.py").write_text(app)
        _run([str(light.python), "app.py"], tmp_path, env)
        db = tmp_path / "llmtrace.duckdb"
        assert db.exists()
        outputs = []
        for line in _page_lines("bash"):
            words = shlex.split(line)
            if words[0] == "pip":
                continue
            if words[0] == "python":
                continue  # app.py, run above
            assert words[0] == "llmtrace", line
            outputs.append(_run([str(light.llmtrace), *words[1:]], tmp_path, env).stdout)
        diagnosis = outputs[0]
        assert "timestamp" in diagnosis and "Traceback" not in diagnosis, diagnosis
        table = outputs[-1]
        assert "gpt-4o-mini" in table, table
    finally:
        if provider is not None:
            provider.terminate()
            provider.wait(timeout=30)

    # sql in every output mode, piped and on a terminal
    query = "SELECT model, prompt_tokens, duration_ms FROM passes ORDER BY start_ns"
    for mode in ([], ["--json"], ["--csv"]):
        piped = _run([str(light.llmtrace), "sql", "--db", str(db), *mode, query], tmp_path, env).stdout
        assert piped.count("gpt-4o-mini") == 6, (mode, piped)
        one = _run([str(light.llmtrace), "sql", "--db", str(db), *mode, "SELECT 1 AS one"], tmp_path, env).stdout
        assert "1" in one, (mode, one)
        tty = _on_a_terminal([str(light.llmtrace), "sql", "--db", str(db), *mode, query], tmp_path, env,
                             until="\0never")
        assert tty.count("gpt-4o-mini") == 6 and "Traceback" not in tty, (mode, tty)

    # the explorer's first screen, on a terminal, then q to quit
    screen = _on_a_terminal([str(light.llmtrace), "explore", "--db", str(db)], tmp_path, env,
                            until="of 6 passes", keys=b"q")
    assert "of 6 passes" in screen and "Traceback" not in screen, screen[-3000:]

    # report without its extra: one line naming the extra, a non-zero exit
    report = _run([str(light.llmtrace), "report", "--db", str(db), "-o", "r.html"], tmp_path, env, ok=False)
    assert report.returncode != 0 and "Traceback" not in report.stderr, report.stderr
    assert "llmtrace-stages[report]" in report.stderr, report.stderr

    # and with it
    light.pip_install(f"{light.wheel}[report]")
    _run([str(light.llmtrace), "report", "--db", str(db), "-o", "r.html"], tmp_path, env)
    page = (tmp_path / "r.html").read_text()
    assert "<svg" in page and "gpt-4o-mini" in page
    assert not light.imports("torch")


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmtrace serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"llmtrace serve did not come up in {timeout_s}s:\n{log.read_text()}")
