"""`llmtrace demo --model tiny`: the whole scenario runs, and each complaint's finding names its stage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmtrace.demo import COMPLAINTS

pytestmark = pytest.mark.slow


@dataclass
class DemoRun:
    """One ``llmtrace demo --model tiny`` process, in a folder of its own."""

    dir: Path
    db: Path
    process: subprocess.Popen[bytes]

    def result(self) -> subprocess.CompletedProcess[str]:
        """Wait for it; its stdout and stderr went to files (a pipe nobody reads yet could stall it)."""
        self.process.wait(timeout=280)
        out, err = ((self.dir / f"demo.{kind}").read_text(errors="replace") for kind in ("out", "err"))
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DemoRun]]:
    """Both demo runs of this module, started at once: they share nothing (each its own folder, store and
    in-process server on a free port), and each spends most of its time on one core (one OpenMP thread), so
    on two cores the second no longer waits for the first."""
    runs: dict[str, DemoRun] = {}
    for name, extra, env in (("json", ["--json"], {}), ("text", [], {"COLUMNS": "200"})):
        folder = tmp_path_factory.mktemp(f"demo-{name}")
        db = folder / "demo.duckdb"
        if name == "json":
            db.write_bytes(b"an older store")  # moved aside, not mixed in
        with (folder / "demo.out").open("wb") as out, (folder / "demo.err").open("wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "llmtrace.cli", "demo", "--model", "tiny", "--db",
                                     str(db), *extra], stdout=out, stderr=err, cwd=folder,
                                    env={**os.environ, "LLMTRACE_STRICT": "1", **env})
        runs[name] = DemoRun(folder, db, proc)
    try:
        yield runs
    finally:
        for run in runs.values():
            if run.process.poll() is None:
                run.process.kill()
            run.process.wait()


def test_demo_names_the_right_stage_for_each_complaint(demos: dict[str, DemoRun]) -> None:
    tmp_path, db = demos["json"].dir, demos["json"].db
    proc = demos["json"].result()
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


def test_demo_prints_the_commands_to_explore(demos: dict[str, DemoRun]) -> None:
    db = demos["text"].db
    proc = demos["text"].result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    for cmd in ("llmtrace explore", "llmtrace sql --db", "llmtrace check --db", "--baseline-deploy v1"):
        assert cmd in proc.stdout
    # the printed check command really fails on the planted regression, naming the stage
    check = subprocess.run([sys.executable, "-m", "llmtrace.cli", "check", "--db", str(db), "--deploy", "v2",
                            "--baseline-deploy", "v1"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "cache.prefix_match" in check.stdout
