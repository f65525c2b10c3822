"""The collector's token: from the environment or a file (not the command line), and /stats behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
from collector_helpers import otlp_provider, query, start_collector

TOKEN = "tok-" + "7" * 28


def _check_auth(col: object, tmp: Path) -> None:
    base = f"http://127.0.0.1:{col.port}"  # type: ignore[attr-defined]
    r = httpx.get(base + "/stats")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert str(tmp) not in r.text and "pid" not in r.text  # nothing about the store without the token
    assert httpx.get(base + "/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    stats = httpx.get(base + "/stats", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert stats["db"].startswith(str(tmp))
    health = httpx.get(base + "/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert httpx.post(base + "/v1/traces", content=b"", headers={"Content-Type": "application/x-protobuf"}
                      ).status_code == 401
    tp = otlp_provider(base + "/v1/traces", "authed", headers={"Authorization": f"Bearer {TOKEN}"})
    tp.get_tracer("t").start_span("ok").end()
    tp.shutdown()
    col.wait_written(1)  # type: ignore[attr-defined]
    cmdline = Path(f"/proc/{col.process.pid}/cmdline").read_bytes()  # type: ignore[attr-defined]
    assert TOKEN.encode() not in cmdline  # not visible in ps


def test_token_from_the_environment(tmp_path: Path) -> None:
    col = start_collector(tmp_path, token=TOKEN, env={"LLMTRACE_COLLECT_TOKEN": TOKEN})
    try:
        _check_auth(col, tmp_path)
        assert "(bearer token required)" in col.log() and "warning" not in col.log()
    finally:
        assert col.stop() == 0
    assert query(col.db, "SELECT name FROM spans") == [("ok",)]


def test_token_from_a_file_and_the_flag_warns(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    col = start_collector(tmp_path, "--token-file", str(f), token=TOKEN, env={"LLMTRACE_COLLECT_TOKEN": ""})
    try:
        _check_auth(col, tmp_path)
        assert "warning" not in col.log()
    finally:
        assert col.stop() == 0
    # the flag still works, and says that it shows in ps; an empty file is a clear error
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "collect", "--db", str(tmp_path / "x.duckdb"),
                          "--port", "0", "--token", "a", "--token-file", str(f)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "not both" in out.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "collect", "--db", str(tmp_path / "x.duckdb"),
                          "--port", "0", "--token-file", str(empty)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is empty" in out.stderr
    col = start_collector(tmp_path, "--token", TOKEN, name="flag", env={"LLMTRACE_COLLECT_TOKEN": ""})
    try:
        assert "--token is visible" in col.log()
        assert json.loads(json.dumps(col.stats()))["requests_ok"] == 0
    finally:
        assert col.stop() == 0
