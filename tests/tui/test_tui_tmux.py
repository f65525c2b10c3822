"""The real ``llmtrace explore`` in a real terminal (tmux): what a person sees and types.

tmux is part of the development machine and CI; without it these tests skip and say why.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (apt-get install tmux); it drives the real terminal")


class Terminal:
    """One tmux server of our own (its own socket), one session, a fixed window size."""

    def __init__(self, command: str, width: int = 100, height: int = 30) -> None:
        self.socket = f"llmtrace-tui-{os.getpid()}-{time.monotonic_ns()}"
        self.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                  f"{command}; echo EXITED $?; sleep 30")

    def tmux(self, *args: str) -> str:
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("TMUX", None)
        # the app sizes itself from the terminal, unless COLUMNS/LINES say otherwise: under pytest-xdist's
        # workers they said 80x24 and the help screen's last rows were out of sight
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        out = subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True,
                             env=env, timeout=20)
        return out.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def wait_for(self, *texts: str, timeout: float = 40.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if all(t in screen for t in texts):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"never saw {texts!r}; the screen was:\n{screen}")

    def wait_gone(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text not in self.screen():
                return
            time.sleep(0.2)
        raise AssertionError(f"{text!r} stayed on screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=20)


def explore_command(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in (sys.executable, "-m", "llmtrace.cli", "explore", *args))


@pytest.fixture
def terminal_factory() -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for t in made:
        t.close()


@pytest.mark.slow
def test_explore_in_a_real_terminal(support_store: Path, terminal_factory: list[Terminal]) -> None:
    term = Terminal(f"cd {shlex.quote(str(support_store.parent))} && {explore_command(support_store.name)}")
    terminal_factory.append(term)
    first = term.wait_for("32 of 32 passes", "smollm2-135m")
    assert "llmtrace explore" in first and "support.duckdb" in first
    assert "Requests (r)" in first and "Waterfall (w)" in first
    assert "TTFT" in first and "cached/hit" in first and "length" in first
    assert "Traceback" not in first
    term.keys("Enter")  # open the newest pass's trace
    # the stage pane explains the highlighted server pass once the trace has rendered; the rows are waited for
    # too (the waterfall draws again once its pane has settled its size: a loaded machine caught it between).
    # Which stage rows show depends on where the waterfall scrolled to follow the highlighted (last) pass, so
    # the rows asked for are the ones beside it: the tool spans, then the last pass's client and server rows
    term.wait_for("trace ", "4 passes · 2 tools", "client chat smollm2-135m", "server chat smollm2-135m",
                  "server pass", "execute_tool search_kb")
    term.keys("3")  # phase 3 only: the cache stages stay, the others go
    only_cache = term.wait_for("12 cache.prefix_match", "only Cache & reuse")
    assert "forward.prefill" not in only_cache
    term.keys("0", "?")
    term.wait_for("phase filter", "esc or ? closes", "open trace")
    term.keys("Escape")  # alone: a terminal reads ESC followed at once by a key as alt+key
    term.wait_gone("esc or ? closes")
    term.keys("c")
    term.wait_for("prefix-cache hit rate over time", "▲v2", "cost per request by deploy")
    term.keys("q")
    term.wait_for("EXITED 0")


def test_missing_and_corrupt_store_are_one_clear_line(tmp_path: Path, terminal_factory: list[Terminal]) -> None:
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"definitely not duckdb" * 500)
    term = Terminal(f"{explore_command(str(tmp_path / 'missing.duckdb'))}; {explore_command(str(junk))}")
    terminal_factory.append(term)
    screen = term.wait_for("EXITED 2")
    assert "llmtrace explore: no store at" in screen
    assert "llmtrace explore: " in screen.split("no store at", 1)[1]  # the corrupt one, on its own line
    assert "Traceback" not in screen
