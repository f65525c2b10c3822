"""What the collector's mapping adds to foreign spans is declared in the registry (the foreign
instrumentation's own names are its own): OpenLLMetry around the real openai SDK, through `llmtrace collect`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import fake_openai
from testkit import undeclared

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_collector_mapping_adds_only_declared_values(tmp_path: Path) -> None:
    db = tmp_path / "collected.duckdb"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    collector = subprocess.Popen([sys.executable, "-m", "llmtrace.cli", "collect", "--db", str(db), "--port",
                                  str(port), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        with fake_openai() as base:
            out = subprocess.run([sys.executable, str(HERE / "foreign_app.py"), "openllmetry",
                                  f"http://127.0.0.1:{port}/v1/traces", base], capture_output=True, text=True,
                                 timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
    finally:
        collector.terminate()
        collector.wait(timeout=30)
    # what the foreign instrumentation wrote under gen_ai.* is its own; what the mapping adds is ours
    bad = undeclared(db, ours=("llmtrace.",))
    assert not bad, f"declare these in the registry: {sorted(bad)}"
