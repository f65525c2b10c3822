"""``llmtrace check`` over a small run: a few calls in the candidate deploy. A deploy that reworded its
system prompt misses the cache once, on its first call, and that one cold call weighs a third of a three-call
run: the hit rate reads 20 points down and the cost per request up, though caching works as before. Such a
run is not a confident regression, nor a confident pass: the gate abstains (exit 3, configurable); a prompt that changes every call (a timestamp up front) is, even in three
calls. The real backend (tiny model), the real OpenAI SDK through ``instrument()``, a price file, and
``llmtrace check`` through the CLI's entry point, against a deploy in the store and a baseline file.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import analyzers_live as live
import pytest

from llmtrace.cli import main

DESK = ("You are the front desk of the Harrowgate climbing gym. Check the waiver before a first session, "
        "book belay courses for Tuesdays and Thursdays, and never let anyone lead climb without a test. ") * 3
ASKS = ["Can I book a belay course?", "Do I need a waiver?", "What are the opening hours?"]


@pytest.fixture
def priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with live.own_prices(tmp_path, monkeypatch, "small-runs", cached_input=0.1):
        yield


def _deploy(db: Path, deploy: str, system: str, calls: int, volatile: bool = False) -> None:
    with live.store(db, deploy=deploy, capture="hashes"):
        c = live.client(live.server())
        for i in range(calls):
            head = f"Request at {time.time_ns()}. " if volatile else ""
            c.chat.completions.create(model="tiny", temperature=0, max_tokens=4,
                                      messages=[{"role": "system", "content": head + system},
                                                {"role": "user", "content": ASKS[i % len(ASKS)]}])


def _run(tmp_path: Path, volatile: bool) -> Path:
    """v1: ten calls on its prompt (one cold); v2: three calls on a reworded prompt (the first cold)."""
    db = tmp_path / "t.duckdb"
    salt = uuid.uuid4().hex[:8]  # the server outlives the test: these prompts must be new to its cache
    _deploy(db, "v1", f"[{salt}] {DESK}", 10)
    _deploy(db, "v2", f"[{salt}] Welcome! {DESK}", 3, volatile=volatile)
    return db


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["check", *args])
    return rc, capsys.readouterr().out


def test_a_reworded_prompt_in_three_calls_is_no_confident_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], priced: None) -> None:
    db = _run(tmp_path, volatile=False)
    rc, out = _check(capsys, "--db", str(db), "--deploy", "v2", "--baseline-deploy", "v1", "--cost")
    # past the allowance at its point, within it at the low end of the interval: the gate abstains (exit 3)
    assert rc == 3, out
    assert "FAIL" not in out and "INCONCLUSIVE cache hit rate" in out and "90% interval" in out, out
    assert "straddles the allowance" in out, out
    for mode, code in (("pass", 0), ("fail", 1), ("inconclusive", 3)):
        assert _check(capsys, "--db", str(db), "--deploy", "v2", "--baseline-deploy", "v1", "--cost",
                      "--inconclusive", mode)[0] == code, mode
    rc, out = _check(capsys, "--db", str(db), "--deploy", "v2", "--baseline-deploy", "v1", "--format", "github")
    assert rc == 3 and "::warning title=llmtrace check%3A cache hit rate inconclusive::" in out, out
    saved = tmp_path / "baseline.json"
    assert main(["check", "--db", str(db), "--deploy", "v1", "--save-baseline", str(saved)]) == 0
    rc, out = _check(capsys, "--db", str(db), "--deploy", "v2", "--baseline", str(saved), "--cost")
    assert rc == 3, out


def test_a_prompt_that_changes_every_call_fails_in_three_calls(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], priced: None) -> None:
    db = _run(tmp_path, volatile=True)
    rc, out = _check(capsys, "--db", str(db), "--deploy", "v2", "--baseline-deploy", "v1", "--cost")
    assert rc == 1 and "FAIL cache hit rate" in out and "FAIL cost per request" in out, out


def test_one_call_a_deploy_is_not_gated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "t.duckdb"
    salt = uuid.uuid4().hex[:8]
    _deploy(db, "v1", f"[{salt}] {DESK}", 6)
    _deploy(db, "v2", f"[{salt}] Hello. {DESK}", 1)
    rc, out = _check(capsys, "--db", str(db), "--deploy", "v2", "--baseline-deploy", "v1")
    assert rc == 3 and "INCONCLUSIVE cache hit rate" in out and "too few passes" in out, out


def test_a_baseline_of_two_passes_gates_nothing_and_an_old_file_still_gates() -> None:
    """Every metric alike: two baseline passes cannot tell a regression (inconclusive, as the hit rate's); an older
    baseline file that kept no passes but counted thirty is compared by its numbers."""
    from llmtrace.analyzers.gate.baseline import Metrics
    from llmtrace.analyzers.gate.check_cli import compare

    cur = Metrics("v2", 30, 0.8, 60.0, 70.0, 0.03, ttft_sample=tuple(60.0 + i for i in range(30)),
                  cost_sample=(0.03,) * 30, hit_sample=((160.0, 180.0),) * 30)
    two = Metrics("v1", 2, 0.8, 20.0, 22.0, 0.01, ttft_sample=(20.0, 22.0), cost_sample=(0.01, 0.01),
                  hit_sample=((160.0, 180.0),) * 2)
    few = [v for v in compare(cur, two, ttft=True, cost=True) if v.metric != "cache_hit_rate"]
    assert all(v.ok and v.inconclusive and "too few passes" in v.inconclusive for v in few), [v.line() for v in few]
    old = Metrics("v1", 30, 0.8, 20.0, 22.0, 0.01)
    gated = [v for v in compare(cur, old, ttft=True, cost=True) if v.metric != "cache_hit_rate"]
    assert not any(v.ok for v in gated), [v.line() for v in gated]
