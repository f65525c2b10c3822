"""``llmtrace check --ttft`` on a machine that got busier between the two deploys. The real backend (tiny
model), the real OpenAI SDK through ``instrument()``, CPU burner processes during the second deploy, and
``llmtrace check`` through the CLI's entry point.

A clean twin whose second deploy ran beside the burners is a warning that names the load, not a failure
(it failed 5 of 6 such runs when TTFT alone was compared); a deploy that really made the first token slower
(more uncached prompt tokens) still fails beside the same burners, and on a quiet machine. The rules
themselves (``busier_machine`` for the median's mean wait, ``busier_passes`` for the passes that set p50 and
p95) are checked on numbers too (here and in test_check_tail_load.py): old baselines without the readings
fail as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import analyzers_live as live
import duckdb
import pytest

from llmtrace.analyzers.gate.baseline import Metrics, PrefillPass, WaitedPass, load_baseline
from llmtrace.analyzers.gate.check_cli import compare
from llmtrace.cli import main
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.storage.typed_values import attr

DESK = ("You answer for the Fernhollow water utility: billing, outages and meters. Quote the account number "
        "back, never promise a refund above fifty euros, and send burst mains to the duty engineer. ") * 3
ASKS = ["Why is my bill higher?", "Is there an outage on Birch Lane?", "How do I read my meter?",
        "Can I pay in instalments?"]


@contextlib.contextmanager
def burners(n: int) -> Iterator[None]:
    """``n`` processes that only spin: the machine's other load, which no deploy decides."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _deploy(db: Path, deploy: str, *, context_words: int = 0, calls: int = 10) -> None:
    srv = live.server()
    salt = uuid.uuid4().hex[:8]  # the server outlives the test: its documents must not be cached already
    with live.store(db, deploy=deploy, capture="hashes"):
        c = live.client(srv)
        for i in range(calls):
            # a retrieval deploy puts uncached documents before each question: more prefill work per call
            doc = " ".join(f"clause{(i * 7919 + k) % 10007}" for k in range(context_words))
            doc = f"{salt} {doc}" if doc else ""
            user = (f"Context: {doc}\n" if doc else "") + ASKS[i % len(ASKS)] + f" (ticket {i})"
            stream = c.chat.completions.create(model="tiny", temperature=0, max_tokens=4, stream=True,
                                               messages=[{"role": "system", "content": DESK},
                                                         {"role": "user", "content": user}])
            for _ in stream:
                pass


def _check(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["check", "--db", str(db), "--ttft", *extra])
    return rc, capsys.readouterr().out


def _burn() -> int:
    return max(2, os.cpu_count() or 2)  # one spinner a core: the engine thread waits for a CPU


def test_a_clean_deploy_on_a_busier_machine_is_a_warning_not_a_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "t.duckdb"
    _deploy(db, "v1")
    with burners(_burn()):
        _deploy(db, "v2")
    rc, out = _check(db, capsys, "--deploy", "v2", "--baseline-deploy", "v1")
    print(out)  # the numbers of this run (pytest -rP shows them)
    # Never a failure. The tail may come out inconclusive (exit 3): ten passes a side on a loaded machine can
    # leave p95's interval straddling the allowance, which the gate reports as such (docs/ci.md); the busy-
    # machine reading covers the median, where a verdict is made.
    assert rc in (0, 3) and not any(line.startswith("FAIL") for line in out.splitlines()), out
    # the second deploy did run slower; where the gate would have failed it, it says why it did not
    for line in out.splitlines():
        if line.startswith("WARN TTFT"):
            assert "the machine was busier" in line, out
    if "WARN" in out:
        assert "waited for a CPU" in out and "warning(s)" in out, out


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
def test_a_deploy_that_prefills_more_still_fails_on_a_quiet_or_busy_machine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], busy: bool) -> None:
    db = tmp_path / "t.duckdb"
    _deploy(db, "v1")
    with burners(_burn() if busy else 0):
        _deploy(db, "v2", context_words=150)
    rc, out = _check(db, capsys, "--deploy", "v2", "--baseline-deploy", "v1")
    print(out)
    assert rc == 1 and "FAIL TTFT p50" in out, out
    assert "the machine was busier" not in out, out


def test_a_baseline_file_keeps_the_engine_readings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, saved = tmp_path / "t.duckdb", tmp_path / "baseline.json"
    _deploy(db, "v1", calls=8)
    assert main(["check", "--db", str(db), "--save-baseline", str(saved)]) == 0
    data = json.loads(saved.read_text())
    # (> 0: the engine's CPU time is the thread's own clock; /proc/thread-self/schedstat's, as of the last tick,
    # read 0 for a 3 ms prefill now and then)
    assert data["prefill_cpu_ms"] > 0 and 0 <= data["prefill_wait_share"] <= 1, data
    assert load_baseline(saved).prefill_cpu_ms == data["prefill_cpu_ms"]
    # and pass by pass, for the tail: TTFT, prefill wall, CPU, wait, tokens, shared the engine
    rows = data["prefill_sample"]
    assert len(rows) == 8 and all(len(r) == 6 and r[1] > 0 and r[4] > 0 and r[5] == 0 for r in rows), rows
    assert load_baseline(saved).prefill_sample[0].ttft_ms == rows[0][0]
    # each pass's TTFT with the time its first token waited for a CPU (the server's loop and engine threads;
    # Linux's run-queue wait), never more than the TTFT
    waited = data["ttft_wait_sample"]
    assert len(waited) == 8 and all(len(r) == 2 and 0 <= r[1] <= r[0] for r in waited), waited
    assert load_baseline(saved).ttft_wait_sample[0] == WaitedPass(*waited[0])


def test_both_sides_record_the_first_tokens_wait_for_a_cpu(tmp_path: Path) -> None:
    """The app's pass span (the calling thread) and the server's (its loop and engine threads) each say how long
    their first token waited for a CPU: never more than the TTFT, and beside a CPU burner on every core, some.
    (Not compared with a quiet run: on a machine that is already busy, a test suite beside it, the quiet run
    waits as much.)"""
    db = tmp_path / "t.duckdb"
    with burners(_burn()):
        _deploy(db, "busy", calls=6)
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(f"""
            SELECT {attr(N.SIDE)} AS side, {attr(N.TTFT_MS)} AS t, {attr(N.TTFT_CPU_WAIT_MS)} AS w FROM spans
            WHERE {attr(N.TTFT_MS)} IS NOT NULL""").fetchall()
    assert sorted({side for side, _, _ in got}) == ["client", "server"], got
    assert len(got) == 12 and all(w is not None and 0 <= w <= t + 0.01 for _, t, w in got), got
    assert sum(w for _, _, w in got) / sum(t for _, t, _ in got) > 0.05, got


def _m(ttft: float, cpu: float | None, wait: float | None) -> Metrics:
    sample = tuple(ttft * (0.9 + 0.01 * i) for i in range(20))
    return Metrics("v", 20, 0.9, ttft, ttft * 1.1, None, ttft_sample=sample, prefill_cpu_ms=cpu,
                   prefill_wait_share=wait)


def test_the_load_rule_on_numbers() -> None:
    base = _m(20.0, 6.0, 0.30)

    def p50(cur: Metrics) -> tuple[bool, str | None]:
        (v,) = [v for v in compare(cur, base, ttft=True) if v.metric == "ttft_p50_ms"]
        return v.ok, v.warning

    # 3.5x slower, the engine's work +30%, its wait share 0.30 -> 0.78 (which alone is 3.2x): the machine
    ok, warning = p50(_m(70.0, 7.8, 0.78))
    assert ok and warning and "waited for a CPU 78%" in warning and "3.2x slower" in warning, warning
    assert p50(_m(70.0, 16.0, 0.78)) == (False, None)  # more work per prefill: the deploy's, busy or not
    assert p50(_m(150.0, 6.0, 0.78)) == (False, None)  # far more than the load explains (a queue, say)
    assert p50(_m(70.0, 6.0, 0.33)) == (False, None)  # the engine did not wait more: not the machine
    assert p50(_m(70.0, None, None)) == (False, None)  # a hosted provider, a foreign server, an old baseline
    ok, warning = p50(_m(21.0, 6.0, 0.78))
    assert ok and warning is None  # within the allowance: nothing to explain
    old = Metrics("v", 20, 0.9, 20.0, 22.0, None, ttft_sample=base.ttft_sample)
    (v,) = [v for v in compare(_m(70.0, 7.8, 0.78), old, ttft=True) if v.metric == "ttft_p50_ms"]
    assert not v.ok and v.warning is None


def test_the_wait_rule_on_numbers() -> None:
    """A TTFT rise the first token's wait for a CPU explains (the CI run that failed: p50 6.0 -> 16.4 ms, the
    prefill's work unchanged, its wait explaining a third) is the machine's; one that remains with the waits
    taken out, or that came with more work per prefill, is the deploy's."""
    def side(ttft: float, wait: float, cpu: float | None = 3.0) -> Metrics:
        passes = tuple(WaitedPass(ttft * (0.95 + 0.01 * i), wait * (0.95 + 0.01 * i)) for i in range(10))
        return Metrics("v", 10, 0.9, ttft, ttft * 1.1, None, ttft_sample=tuple(p.ttft_ms for p in passes),
                       prefill_cpu_ms=cpu, prefill_wait_share=0.1 if cpu else None, ttft_wait_sample=passes)

    base = side(6.0, 0.3)

    def p50(cur: Metrics, b: Metrics = base) -> tuple[bool, str | None]:
        (v,) = [v for v in compare(cur, b, ttft=True) if v.metric == "ttft_p50_ms"]
        return v.ok, v.warning

    ok, warning = p50(side(16.4, 10.5))  # 64% of it waiting: 5.9 ms without, against 5.7
    assert ok and warning and "waited for a CPU 64%" in warning and "p50 is 5.9 ms (baseline 5.7 ms" in warning, warning
    assert p50(side(16.4, 4.0)) == (False, None)  # 12.4 ms without the waits: slower, busy or not
    assert p50(side(16.4, 10.5, cpu=6.5)) == (False, None)  # the engine's work doubled: the deploy's
    ok, warning = p50(side(16.4, 10.5, cpu=None), side(6.0, 0.3, cpu=None))  # no engine readings (a hosted
    assert ok and warning and "work" not in warning, warning  # provider through the middleware): the waits alone
    assert p50(side(16.4, 10.5), replace(base, ttft_wait_sample=())) == (False, None)  # an older baseline


def test_the_tail_is_judged_from_its_own_passes() -> None:
    """Under CPU burners one pass now and then loses a whole time slice, so p95 stretches far past the mean
    wait (seen: p50 48 ms against 11.6, waived as the machine's; p95 155 ms against 17). The tail is the
    machine's only when its own passes say so (their wait for a CPU, their prompt tokens, no queue:
    test_check_tail_load.py); a median waived for the load no longer vouches for it."""
    base = _m(20.0, 6.0, 0.30)
    slow = [PrefillPass(t, 24.0, 6.0, 18.0, 20.0, 0.0) for t in (300.0, 320.0, 340.0)]  # waited 75% for a CPU
    steady = [PrefillPass(70.0 + i, 24.0, 6.0, 18.0, 20.0, 0.0) for i in range(17)]
    base_passes = tuple(PrefillPass(t, 8.0, 5.5, 2.4, 20.0, 0.0) for t in base.ttft_sample)

    def verdicts(cpu: float, per_pass: bool) -> dict[str, tuple[bool, str | None]]:
        sample = tuple([70.0 + i for i in range(17)] + [300.0, 320.0, 340.0])  # three passes preempted
        cur = Metrics("v", 20, 0.9, 78.0, 320.0, None, ttft_sample=sample, prefill_cpu_ms=cpu,
                      prefill_wait_share=0.78, prefill_sample=tuple(steady + slow) if per_pass else ())
        b = replace(base, prefill_sample=base_passes) if per_pass else base
        return {v.metric: (v.ok, v.warning) for v in compare(cur, b, ttft=True)}

    busy = verdicts(7.8, per_pass=True)
    assert busy["ttft_p50_ms"][0] and busy["ttft_p95_ms"][0], busy
    assert "waited for a CPU 75% of the prefill time of the 2 slowest passes" in (busy["ttft_p95_ms"][1] or ""), busy
    unread = verdicts(7.8, per_pass=False)  # the median waived, the tail's passes not kept: the tail fails
    assert unread["ttft_p50_ms"][0] and unread["ttft_p95_ms"] == (False, None), unread
    slower = verdicts(16.0, per_pass=True)  # more work per prefill: the deploy's, the median and the tail alike
    assert slower["ttft_p50_ms"] == (False, None) and slower["ttft_p95_ms"] == (False, None), slower
