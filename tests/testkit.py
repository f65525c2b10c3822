"""Helpers shared by every test area (import with ``from testkit import ...``; a module name of its own,
because several folders have a conftest.py and ``from conftest import`` would pick whichever came first)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningServer:
    base_url: str
    port: int
    db_path: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(tmp: Path, *extra: str, model: str = "tiny", timeout_s: float = 120.0) -> RunningServer:
    """Start the real ``llmtrace serve`` on a loopback port and wait until /v1/models answers."""
    port = free_port()
    db = tmp / "server.duckdb"
    log_path = tmp / f"server-{port}.log"
    cmd = [sys.executable, "-m", "llmtrace.cli", "serve", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--db", str(db), *extra]
    log = log_path.open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "LLMTRACE_STRICT": "1"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmtrace serve exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{base}/v1/models", timeout=1.0).status_code == 200:
                return RunningServer(base, port, db, proc, log_path)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"llmtrace serve did not come up in {timeout_s}s:\n{log_path.read_text()}")


def stop_server(server: RunningServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()




# ── the registry as the schema: what a store holds that no catalog declares ──────────────────────────
def undeclared(db: Path, *, ours: tuple[str, ...] = ("llmtrace.", "gen_ai.")) -> set[tuple[str, str]]:
    """(stage or operation, value name) pairs in ``db`` that the registry does not declare: a stage span's
    values on its stage (or on every stage), anything else in the pass catalog. Only names in ``ours``."""
    import duckdb

    from llmtrace.tracer.registry.stages import COMMON_VALUES, STAGES, declared_value

    on_stage = {s.id: {v.name for v in (*s.values, *COMMON_VALUES)} for s in STAGES}
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("""SELECT DISTINCT coalesce(stage, operation, name), stage IS NOT NULL, k
                          FROM (SELECT stage, operation, name, unnest(json_keys(attributes)) AS k FROM spans)""").fetchall()
    con.close()
    bad = set()
    for where, is_stage, key in rows:
        if not key.startswith(ours) or key in ("llmtrace.stage", "llmtrace.phase"):
            continue
        if is_stage and where in on_stage:
            if key not in on_stage[where]:
                bad.add((where, key))
        elif declared_value(key) is None:
            bad.add((where, key))
    return bad


# The four client shapes a call can take: each SDK, plain and streamed (parametrize ``("api", "stream")``)
API_SHAPES = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
API_SHAPE_IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]


def diagnose_json(db: Path, capsys: Any, *extra: str) -> list[dict[str, Any]]:
    """``llmtrace diagnose --json`` (and ``extra`` arguments) through the CLI's entry point; its findings, best
    first (``capsys`` is pytest's fixture: what was printed before is dropped)."""
    import json

    from llmtrace.cli import main

    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json", *extra]) == 0
    return list(json.loads(capsys.readouterr().out)["findings"])

