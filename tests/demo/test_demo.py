"""`llmtrace demo --model tiny`: the whole scenario runs, and each complaint's finding names its stage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmtrace.demo import COMPLAINTS

pytestmark = pytest.mark.slow


def test_demo_names_the_right_stage_for_each_complaint(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    db.write_bytes(b"an older store")  # moved aside, not mixed in
    proc = subprocess.run([sys.executable, "-m", "llmtrace.cli", "demo", "--model", "tiny", "--db", str(db), "--json"],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path,
                          env={**os.environ, "LLMTRACE_STRICT": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["passes"] >= 20
    for complaint, (symptom, stages_ok) in COMPLAINTS.items():
        f = out["complaints"][complaint]
        assert f is not None, f"no finding for {complaint!r}"
        assert f["symptom"] == symptom and f["stage"] in stages_ok, (complaint, f["stage"], f["title"])
        assert f["trace_ids"] and f["evidence"]
    slow = out["complaints"]["The first token is slow since the last deploy"]
    assert "v2" in slow["title"] and "system" in slow["title"]
    # where the slow first tokens' time went, from the time breakdown of the server passes behind it
    split = next(e for e in slow["evidence"] if e["label"].startswith("time to first token spent in prefill"))
    assert "of TTFT" in split["value"] and "uncached tokens" in split["value"]
    # one cause, one finding: the system prompt's timestamp is the cache finding's, crossing both stages
    stages_found = {s for f in out["findings"] if f["symptom"] == "slow_first_token"
                    for s in (f["stage"], *f.get("stages", ()))}
    assert "intake.system_prompt" in stages_found
    assert "loop.fan_out" in stages_found  # the sequential turns re-prefilled what each tool call appended
    forgets = out["complaints"]["In long chats the agent forgets the order number"]
    assert any("48213" in str(e["value"]) for e in forgets["evidence"])
    assert db.exists() and (tmp_path / "demo.duckdb.before-demo").read_bytes() == b"an older store"


def test_demo_prints_the_commands_to_explore(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    proc = subprocess.run([sys.executable, "-m", "llmtrace.cli", "demo", "--model", "tiny", "--db", str(db)],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path,
                          env={**os.environ, "LLMTRACE_STRICT": "1", "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for cmd in ("llmtrace explore", "llmtrace sql --db", "llmtrace check --db", "--baseline-deploy v1"):
        assert cmd in proc.stdout
    # the printed check command really fails on the planted regression, naming the stage
    check = subprocess.run([sys.executable, "-m", "llmtrace.cli", "check", "--db", str(db), "--deploy", "v2",
                            "--baseline-deploy", "v1"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "cache.prefix_match" in check.stdout
