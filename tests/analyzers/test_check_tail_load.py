"""``llmtrace check --ttft`` judges a TTFT quantile's rise from the passes that set it (busier_passes): a tail
made slow by waits for a CPU is a warning naming the load, a tail made slow by the deploy still fails.

Seen on a clean twin whose second deploy ran beside CPU burners: p50 steady (6.1 ms against 6.3) but p95
22.4 ms against 7.8, FAIL. A few passes lost a whole time slice; the mean wait for a CPU cannot explain that
and the median's rise, which was within the allowance, could not vouch for the tail.
"""

from __future__ import annotations

import json

from llmtrace.analyzers.gate.baseline import Metrics, PrefillPass
from llmtrace.analyzers.gate.check_cli import band_passes, compare
from llmtrace.analyzers.gate.check_report import Verdict


def _pass(ttft: float, *, wait_share: float = 0.1, tokens: float = 20, cpu: float = 3.0,
          shared: bool = False) -> PrefillPass:
    """A pass whose prefill took ``cpu`` ms of the engine's own work and waited ``wait_share`` of its wall
    time for a CPU; the rest of its TTFT is outside the prefill."""
    wall = cpu / (1 - wait_share) / 0.9  # a tenth of the prefill neither ran nor waited to run
    return PrefillPass(ttft, round(wall, 3), cpu, round(wall * wait_share, 3), tokens, 1.0 if shared else 0.0)


def _metrics(passes: list[PrefillPass], *, keep: bool = True, readings: bool = True) -> Metrics:
    """A side's numbers as measure() gives them. ``keep``: the per-pass readings (a baseline written before
    them has none); ``readings``: the prefill readings at all (a hosted provider, an old baseline)."""
    ttfts = sorted(p.ttft_ms for p in passes)

    def q(f: float) -> float:
        at = f * (len(ttfts) - 1)
        lo = int(at)
        return ttfts[lo] + (ttfts[min(lo + 1, len(ttfts) - 1)] - ttfts[lo]) * (at - lo)

    cpus = sorted(p.cpu_ms for p in passes)
    share = sum(p.wait_ms for p in passes) / sum(p.wall_ms for p in passes)
    return Metrics("v", len(passes), 0.9, q(0.5), q(0.95), None, ttft_sample=tuple(p.ttft_ms for p in passes),
                   prefill_cpu_ms=cpus[len(cpus) // 2] if readings else None,
                   prefill_wait_share=share if readings else None,
                   prefill_sample=tuple(passes) if keep and readings else ())


BASE = [_pass(6.0 + 0.03 * i) for i in range(18)] + [_pass(7.6), _pass(7.9)]  # p50 6.3, p95 7.8


def _busy_tail(**slow: object) -> list[PrefillPass]:
    """The clean twin beside burners: the median as it was, five of twenty passes lost a time slice (their
    prefill waited for a CPU three quarters of its time). ``slow``: what else those five passes did."""
    tail = [_pass(22.0 + 0.5 * i, **{"wait_share": 0.75, **slow}) for i in range(5)]  # type: ignore[arg-type]
    return [_pass(5.8 + 0.03 * i) for i in range(15)] + tail


def _ttft(cur: Metrics, base: Metrics) -> dict[str, Verdict]:
    return {v.metric: v for v in compare(cur, base, ttft=True) if v.metric.startswith("ttft_")}


def test_a_tail_that_waited_for_a_cpu_is_a_warning_naming_the_load() -> None:
    v = _ttft(_metrics(_busy_tail()), _metrics(BASE))
    assert v["ttft_p50_ms"].ok and v["ttft_p50_ms"].warning is None, v  # the median held: nothing to explain
    p95 = v["ttft_p95_ms"]
    assert p95.current is not None and p95.current > 20 and p95.baseline is not None and p95.baseline < 8, p95
    assert p95.ok and p95.limit.endswith("; the machine was busier"), p95
    assert p95.warning is not None and p95.warning.startswith("the machine was busier, not the deploy slower"), p95
    assert "waited for a CPU 75% of the prefill time of the 2 slowest passes" in p95.warning, p95.warning
    assert "none of them shared the engine" in p95.warning, p95.warning


def test_a_tail_the_deploy_made_slower_still_fails_on_a_busy_machine() -> None:
    base = _metrics(BASE)
    # the slow passes prefilled a longer context: the deploy's, though they waited for a CPU too
    more_tokens = _ttft(_metrics(_busy_tail(tokens=400)), base)["ttft_p95_ms"]
    assert not more_tokens.ok and more_tokens.warning is None, more_tokens
    # they queued behind other passes (a running slot, a shared batch) far longer than the load explains
    queued = _ttft(_metrics(_busy_tail(shared=True)), base)["ttft_p95_ms"]
    assert not queued.ok and queued.warning is None, queued
    # a slower kernel: the engine's own CPU work per prefill grew, in every pass
    kernel = [p._replace(cpu_ms=p.cpu_ms * 2, wall_ms=p.wall_ms * 2, wait_ms=p.wait_ms * 2) for p in _busy_tail()]
    slower = _ttft(_metrics(kernel), base)["ttft_p95_ms"]
    assert not slower.ok and slower.warning is None, slower


def test_a_tail_that_shared_the_engine_is_the_machine_s_only_when_its_waits_explain_the_rise() -> None:
    """Passes that ran in a batch with others may have queued: waived only when their prefill, at the
    baseline's share of the CPU, brings the rise within the allowance (here the whole TTFT is prefill)."""
    def slow(i: int) -> PrefillPass:
        wall = 22.0 + 0.5 * i  # all of the TTFT in the prefill, 90% of it waiting for a CPU
        return PrefillPass(wall, wall, wall * 0.08, wall * 0.9, 20.0, 1.0)

    cur = [_pass(5.8 + 0.03 * i) for i in range(15)] + [slow(i) for i in range(5)]
    p95 = _ttft(_metrics(cur), _metrics(BASE))["ttft_p95_ms"]
    assert p95.ok and "2 of them shared the engine with other passes" in (p95.warning or ""), p95


def test_a_slow_tail_on_a_quiet_machine_still_fails() -> None:
    # the slow passes waited for a CPU no more than the baseline's did: nothing the machine did explains them
    quiet = _ttft(_metrics(_busy_tail(wait_share=0.1)), _metrics(BASE))["ttft_p95_ms"]
    assert not quiet.ok and quiet.warning is None, quiet


def test_the_median_follows_the_load_but_the_tail_is_judged_on_its_own() -> None:
    """Before, a p95 rise was waived whenever the p50 rise was the machine's. A busy machine (every pass
    waiting for a CPU) whose deploy also sent a tenth of its calls a long context: the median is the load,
    the tail is the deploy's."""
    busy = [_pass(14.0 + 0.05 * i, wait_share=0.6) for i in range(17)]
    long_context = [_pass(60.0 + i, wait_share=0.6, tokens=600, cpu=3.2) for i in range(3)]
    v = _ttft(_metrics(busy + long_context), _metrics(BASE))
    assert v["ttft_p50_ms"].ok and "the machine was busier" in (v["ttft_p50_ms"].warning or ""), v
    assert not v["ttft_p95_ms"].ok and v["ttft_p95_ms"].warning is None, v["ttft_p95_ms"]
    # the same busy median, its tail passes slow from the same waits, the same prompts: both warnings
    same = _ttft(_metrics(busy + [_pass(60.0 + i, wait_share=0.9) for i in range(3)]), _metrics(BASE))
    assert all(x.ok and x.warning for x in same.values()), same


def test_baselines_without_the_per_pass_readings_fail_as_before() -> None:
    cur = _metrics(_busy_tail())
    for base in (_metrics(BASE, keep=False), _metrics(BASE, readings=False)):
        p95 = _ttft(cur, base)["ttft_p95_ms"]
        assert not p95.ok and p95.warning is None, p95
    # and a current side without them (a hosted provider) against a baseline with them
    p95 = _ttft(_metrics(_busy_tail(), keep=False), _metrics(BASE))["ttft_p95_ms"]
    assert not p95.ok and p95.warning is None, p95


def test_a_baseline_file_keeps_the_per_pass_readings() -> None:
    base = _metrics(BASE)
    data = json.loads(json.dumps(base.to_dict()))
    assert data["prefill_sample"][0] == list(BASE[0]), data["prefill_sample"][0]
    assert Metrics.from_dict(data).prefill_sample == base.prefill_sample
    old = {k: v for k, v in data.items() if k != "prefill_sample"}  # written before the readings
    assert Metrics.from_dict(old).prefill_sample == ()
    data["prefill_sample"] = [[1.0, 2.0], "x", [1, 2, 3, 4, 5, True]]  # malformed rows are dropped
    assert Metrics.from_dict(data).prefill_sample == ()


def test_the_passes_that_set_a_quantile() -> None:
    ps = [_pass(float(t)) for t in range(1, 11)]  # ten passes: a quantile interpolates between two
    assert [p.ttft_ms for p in band_passes(ps, 0.95)] == [9.0, 10.0]
    assert [p.ttft_ms for p in band_passes(ps, 0.5)] == [5.0, 6.0]
    many = [_pass(float(t)) for t in range(1, 101)]
    assert [p.ttft_ms for p in band_passes(many, 0.95)] == [float(t) for t in range(91, 101)]
