"""``llmtrace check``: the CI gate. Compare the cache hit rate (and optionally TTFT p50/p95 and cost per
request) of the current store or deploy with a baseline, and exit 1 on a regression beyond a threshold,
naming the finding that explains it.

    llmtrace check --save-baseline baseline.json          # on main: record what good looks like
    llmtrace check --baseline baseline.json --ttft --format github
    llmtrace check --deploy v2 --baseline-deploy v1 --format junit --output check.xml

Exit status: 0 no regression, 1 regression, 2 the check could not run (no store, no passes, bad baseline),
3 inconclusive: the bootstrap interval of a metric's change straddles its allowance, or a side has too few
passes to tell (``--inconclusive fail|pass`` makes that 1 or 0; docs/ci.md).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from llmtrace.analyzers.core.query import Query
from llmtrace.analyzers.core.stats import percentile
from llmtrace.analyzers.gate.baseline import (
    MIN_CPU_PASSES,
    Metrics,
    PrefillPass,
    deploys,
    latest_deploy,
    load_baseline,
    measure,
    save_baseline,
)
from llmtrace.analyzers.gate.check_interval import MIN_PASSES, Interval, drop_interval, ratio_interval
from llmtrace.analyzers.gate.check_report import FORMATS, Verdict, inconclusive_annotation
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.store import StoreError

EXIT_INCONCLUSIVE = 3  # neither pass (0) nor regression (1) nor could not run (2): not enough evidence
INCONCLUSIVE_MODES = ("inconclusive", "fail", "pass")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="store file (default: $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--parquet", metavar="GLOB", help="check a Parquet export instead")
    parser.add_argument("--store", metavar="URL", help="ClickHouse: clickhouse://HOST:8123/DB or chdb://PATH "
                                                       "(default: $LLMTRACE_STORE; docs/scale.md)")
    parser.add_argument("--deploy", help="the deploy to check (default: the whole window, or the latest deploy "
                                         "with --baseline-deploy)")
    base = parser.add_mutually_exclusive_group()
    base.add_argument("--baseline", metavar="FILE", help="baseline JSON written by --save-baseline")
    base.add_argument("--baseline-deploy", metavar="NAME", help="compare against another deploy in the same store "
                                                                "('previous' for the one before --deploy)")
    base.add_argument("--save-baseline", metavar="FILE", help="write the current numbers as a baseline and exit 0")
    parser.add_argument("--since", help="only spans from the last 30m / 2h / 7d, or after an ISO date/time")
    parser.add_argument("--service", metavar="NAME", help="only the traces this service took part in")
    parser.add_argument("--max-hit-rate-drop", type=float, default=0.05,
                        help="fail when the hit rate falls by more than this (absolute, default 0.05 = 5 points)")
    parser.add_argument("--ttft", action="store_true", help="also check TTFT p50 and p95")
    parser.add_argument("--max-ttft-increase", type=float, default=0.2,
                        help="fail when TTFT p50/p95 rise by more than this fraction (default 0.2)")
    parser.add_argument("--cost", action="store_true", help="also check cost per request")
    parser.add_argument("--max-cost-increase", type=float, default=0.1,
                        help="fail when cost per request rises by more than this fraction (default 0.1)")
    parser.add_argument("--min-passes", type=int, default=1, help="fail to run (exit 2) with fewer passes")
    parser.add_argument("--inconclusive", choices=INCONCLUSIVE_MODES, default="inconclusive",
                        help="what a verdict the gate abstains on (the interval straddles the allowance, or too few "
                             f"passes) does to the exit status: inconclusive (exit {EXIT_INCONCLUSIVE}, the default), "
                             "fail (exit 1) or pass (exit 0)")
    parser.add_argument("--format", choices=sorted(FORMATS), default="text", help="report format (default text)")
    parser.add_argument("--output", metavar="FILE", help="write the report here (the text summary still prints)")


def compare(current: Metrics, baseline: Metrics, *, max_hit_drop: float = 0.05, ttft: bool = False,
            max_ttft_increase: float = 0.2, cost: bool = False, max_cost_increase: float = 0.1) -> list[Verdict]:
    """One verdict per metric checked, decided from a bootstrap interval of the change over both sides' passes
    (analyzers/gate/check_interval.py): pass when all of it is within the allowance, fail when all of it is past,
    inconclusive when it straddles the allowance or a side has too few passes to resample (a small run's cold
    first call, or its mix of answers, is no regression, and no proof of none either)."""
    for name, allowed in (("max_hit_drop", max_hit_drop), ("max_ttft_increase", max_ttft_increase),
                          ("max_cost_increase", max_cost_increase)):
        if allowed < 0:
            raise ValueError(f"{name} must be >= 0")
    out = []
    if current.hit_rate is None or baseline.hit_rate is None:
        out.append(Verdict("cache_hit_rate", "cache hit rate", current.hit_rate, baseline.hit_rate, "", True,
                           skipped="no cached-token counts on one side (not every instrumentation records them)"))
    else:
        few = _few(baseline, baseline.hit_sample)
        iv = drop_interval(baseline.hit_sample if len(baseline.hit_sample) >= MIN_PASSES else (), current.hit_sample,
                           None if few else baseline.hit_rate)
        drop = baseline.hit_rate - current.hit_rate
        out.append(_decide("cache_hit_rate", "cache hit rate", current, baseline, drop <= max_hit_drop + 1e-12,
                           f"allowed drop {max_hit_drop * 100:.3g} points", iv, max_hit_drop,
                           lambda x: f"{x * 100:+.3g} points"))
    checks: list[tuple[str, str, float | None, float | None, float]] = []
    if ttft:
        checks += [("ttft_p50_ms", "TTFT p50", current.ttft_p50_ms, baseline.ttft_p50_ms, max_ttft_increase),
                   ("ttft_p95_ms", "TTFT p95", current.ttft_p95_ms, baseline.ttft_p95_ms, max_ttft_increase)]
    if cost:
        priced = bool(current.cost_per_request_usd or baseline.cost_per_request_usd)
        if priced or current.billed_tokens_per_request is None or baseline.billed_tokens_per_request is None:
            checks.append(("cost_per_request_usd", "cost per request", current.cost_per_request_usd,
                           baseline.cost_per_request_usd, max_cost_increase))
        else:  # no price known on either side (a self-hosted model is $0 a call): what the calls would bill
            checks.append(("billed_tokens_per_request", "billed tokens per request (no price known)",
                           current.billed_tokens_per_request, baseline.billed_tokens_per_request, max_cost_increase))
    for metric, label, cur, base, limit in checks:
        if cur is None or base is None:
            out.append(Verdict(metric, label, cur, base, "", True, skipped="not recorded on one side"))
            continue
        c_sample, b_sample = _readings(current, metric), _readings(baseline, metric)
        q = 0.5 if metric == "ttft_p50_ms" else 0.95
        # (a baseline of one or two passes: no interval, see _decide; an older file that kept no sample: its number)
        iv = None if _few(baseline, b_sample) else ratio_interval(c_sample, b_sample, _statistic(metric, q), base)
        v = _decide(metric, label, current, baseline, cur <= base * (1 + limit) + 1e-12,
                    f"allowed increase {limit:.0%}", iv, 1 + limit, lambda x: f"{x - 1:+.0%}")
        if (not v.ok or v.inconclusive) and metric.startswith("ttft_"):
            # Latency moves with load on the machine: the median from the engine's mean wait for a CPU or from
            # the passes at the median; the tail from its own slowest passes (a contended CPU stretches a few
            # passes by a whole time slice, far past the mean wait)
            low = iv.low if iv is not None else None
            warning = busier_waits(current, baseline, limit, q) \
                or (busier_machine(current, baseline, limit, low) if metric == "ttft_p50_ms" else None) \
                or busier_passes(current, baseline, limit, low, q)
            if warning is not None:  # a warning, not a failure: the deploy did not make the first token slower
                v = replace(v, ok=True, limit=v.limit + "; the machine was busier", warning=warning, inconclusive=None)
        out.append(v)
    return out


def _decide(metric: str, label: str, current: Metrics, baseline: Metrics, point_ok: bool, rule: str,
            iv: Interval | None, allowance: float, say: Callable[[float], str]) -> Verdict:
    """A metric's verdict from its interval ``iv`` of the change against ``allowance`` (its ends said by
    ``say``): pass, fail, or inconclusive (ok, with the reason in ``inconclusive``)."""
    cur, base = _value(current, metric), _value(baseline, metric)
    if iv is None:
        if min(current.passes, baseline.passes) < MIN_PASSES or _few(baseline, _samples(baseline, metric)):
            return Verdict(metric, label, cur, base, rule, True, inconclusive=(
                f"too few passes to tell a regression from noise ({current.passes} against {baseline.passes}; "
                f"{MIN_PASSES} a side needed)"))
        return Verdict(metric, label, cur, base, rule, point_ok)  # no passes kept to resample: the number alone
    rule = f"{rule}; 90% interval {say(iv.low)} to {say(iv.high)}"
    state = iv.side_of(allowance)
    if state == "inconclusive":
        return Verdict(metric, label, cur, base, rule, True, inconclusive=(
            f"the interval straddles the allowance ({say(allowance)}): "
            f"{'past it at its point, within it at its low end' if not point_ok else 'within it at its point, past it at its high end'}"
            "; more passes on each side would decide"), interval=(iv.low, iv.high))
    return Verdict(metric, label, cur, base, rule, state == "pass", interval=(iv.low, iv.high))


def _value(side: Metrics, metric: str) -> float | None:
    return {"cache_hit_rate": side.hit_rate, "ttft_p50_ms": side.ttft_p50_ms, "ttft_p95_ms": side.ttft_p95_ms,
            "cost_per_request_usd": side.cost_per_request_usd,
            "billed_tokens_per_request": side.billed_tokens_per_request}[metric]


def _statistic(metric: str, q: float) -> Callable[[list[float]], float]:
    """What a metric compares of each side's readings: a TTFT quantile, or the mean (cost, billed tokens)."""
    if metric.startswith("ttft_"):
        return lambda xs: percentile(xs, q) or 0.0
    return lambda xs: sum(xs) / len(xs)


def _readings(side: Metrics, metric: str) -> Sequence[float]:
    """The per-pass readings behind one side's value of a ratio metric (TTFTs, billed tokens or costs)."""
    return side.ttft_sample if metric.startswith("ttft_") else \
        side.billed_sample if metric.startswith("billed_") else side.cost_sample


def _samples(side: Metrics, metric: str) -> Sequence[object]:
    """The per-pass readings behind one side's value of ``metric`` (TTFTs, billed tokens, costs, or the
    hit rate's (cached, prompt) pairs)."""
    return side.hit_sample if metric == "cache_hit_rate" else side.ttft_sample if metric.startswith("ttft_") else \
        side.billed_sample if metric.startswith("billed_") else side.cost_sample


def _few(side: Metrics, sample: Sequence[object]) -> bool:
    """True when a side kept too few passes in ``sample`` to resample; an older baseline file that kept no
    sample but counted enough passes is compared by its number alone."""
    return len(sample) < MIN_PASSES and (len(sample) > 0 or side.passes < MIN_PASSES)


# How much slower than in the baseline the engine's waits for a CPU alone made its prefill, (1 - baseline's
# wait share) / (1 - the current one), before a TTFT rise can be the machine's: the machine ran something
# else besides (a CI neighbour, tests in parallel), which no deploy of the app decides.
LOAD_MIN_STRETCH = 1.10


def busier_machine(current: Metrics, baseline: Metrics, limit: float, low: float | None) -> str | None:
    """Why a TTFT rise (``low``: its bootstrap lower bound as a ratio, None for the number alone) is the
    machine's and not the deploy's, in words; None unless the numbers say so.

    Both sides must have our server's prefill CPU readings (forward.prefill's cpu_ms and cpu_wait_ms). The
    rise is the machine's when (1) the engine waited for a CPU enough more of its prefill time to make it at
    least LOAD_MIN_STRETCH slower, (2) its own CPU work per prefill did not grow past the allowance (a slower
    kernel, more uncached prompt tokens or a cache that stopped hitting all raise it, and still fail, on a
    quiet machine or a busy one), and (3) divided by that slowdown the rise is within the allowance (a deploy
    that queues its calls is still caught on a busy machine). On a contended CPU a step's own work grows a
    little too (its caches are refilled after each switch): the rise in the wait share is allowed on top (a
    clean twin under two CPU burners: work +33% at a wait share 0.32 -> 0.78)."""
    cw, bw = current.prefill_wait_share, baseline.prefill_wait_share
    cc, bc = current.prefill_cpu_ms, baseline.prefill_cpu_ms
    if cw is None or bw is None or cc is None or bc is None or bc <= 0 or cw >= 1:
        return None
    stretch = (1 - bw) / (1 - cw)
    ratio = low if low is not None else (current.ttft_p50_ms or 0) / (baseline.ttft_p50_ms or 1)
    if stretch < LOAD_MIN_STRETCH or cc > bc * (1 + limit + max(0.0, cw - bw)) or ratio / stretch > 1 + limit:
        return None
    return (f"the machine was busier, not the deploy slower: the server's engine waited for a CPU {cw:.0%} of "
            f"its prefill time (baseline {bw:.0%}), which alone makes it {stretch:.1f}x slower, while its own CPU "
            f"work per prefill was {cc:.1f} ms (baseline {bc:.1f} ms); at the baseline's share of the CPU the "
            f"rise is {ratio / stretch - 1:+.0%}")


def busier_waits(current: Metrics, baseline: Metrics, limit: float, q: float) -> str | None:
    """Why a rise of TTFT quantile ``q`` is the machine's and not the deploy's, read from how long each pass's
    first token waited for a CPU (``ttft_wait_sample``: the threads it waited on, run-queue wait); None unless
    the numbers say so. This reads every wake-up between the request and its first token (the HTTP loop handing
    the request on, the engine starting its step, the token going out), where the prefill's own wait reads
    only the prefill: a CI run's clean twin rose 6.0 -> 16.4 ms at p50 with its prefill work unchanged and its
    prefill waits explaining a third of it.

    The rise is the machine's when (1) the passes waited for a CPU enough more of their TTFT than the
    baseline's did to make them at least LOAD_MIN_STRETCH slower, (2) with each pass's wait taken out the
    quantile rose no more than the allowance (plus the rise in the wait share, as busier_machine allows the
    work: a contended CPU refills its caches after each switch), and (3) where our server measured it, the
    engine's own CPU work per prefill grew no more than that either (a slower kernel, more uncached prompt
    tokens: those fail on a busy machine as on a quiet one). Two threads waiting at once are both counted, so
    (2) can excuse a little more than it should; (3) still holds a deploy that adds work to account."""
    cs, bs = current.ttft_wait_sample, baseline.ttft_wait_sample
    if min(len(cs), len(bs)) < MIN_CPU_PASSES:
        return None
    c_total, b_total = sum(p.ttft_ms for p in cs), sum(p.ttft_ms for p in bs)
    if c_total <= 0 or b_total <= 0:
        return None
    cw, bw = sum(p.wait_ms for p in cs) / c_total, sum(p.wait_ms for p in bs) / b_total
    c_net = percentile([p.ttft_ms - p.wait_ms for p in cs], q)
    b_net = percentile([p.ttft_ms - p.wait_ms for p in bs], q)
    if cw >= 1 or not c_net or not b_net:
        return None
    stretch, rise, slack = (1 - bw) / (1 - cw), c_net / b_net, max(0.0, cw - bw)
    cc, bc = current.prefill_cpu_ms, baseline.prefill_cpu_ms
    work = ""
    if cc is not None and bc is not None and bc > 0:
        if cc > bc * (1 + limit + slack):
            return None
        work = f"; the engine's own CPU work per prefill was {cc:.1f} ms (baseline {bc:.1f} ms)"
    if stretch < LOAD_MIN_STRETCH or rise > 1 + limit + slack:
        return None
    return (f"the machine was busier, not the deploy slower: the first token waited for a CPU {cw:.0%} of its "
            f"time (baseline {bw:.0%}), which alone makes it {stretch:.1f}x slower; with each pass's wait taken "
            f"out, TTFT {'p95' if q > 0.5 else 'p50'} is {c_net:.1f} ms (baseline {b_net:.1f} ms, {rise - 1:+.0%})"
            f"{work}")


# The passes a TTFT quantile is judged from: a tenth of each side's passes, two at least (the two a
# quantile of ten passes interpolates between), those nearest the quantile (the slowest, for p95).
BAND_SHARE = 0.10


def band_passes(sample: Sequence[PrefillPass], q: float) -> list[PrefillPass]:
    """The BAND_SHARE of ``sample`` (two at least) whose TTFT ranks are nearest quantile ``q``'s."""
    ranked = sorted(sample, key=lambda p: p.ttft_ms)
    at, k = q * (len(ranked) - 1), max(2, math.ceil(BAND_SHARE * len(ranked)))
    nearest = sorted(range(len(ranked)), key=lambda i: (abs(i - at), -i))[:k]  # ties: the slower rank
    return [ranked[i] for i in sorted(nearest)]  # in TTFT order


def busier_passes(current: Metrics, baseline: Metrics, limit: float, low: float | None, q: float) -> str | None:
    """Why a rise of TTFT quantile ``q`` (``low`` as in busier_machine) is the machine's and not the deploy's,
    in words, read from the passes that set that quantile on each side (band_passes of prefill_sample: the
    slowest tenth for p95); None unless the numbers say so. A contended CPU now and then takes a whole time
    slice from one pass: the tail stretches far past the mean wait for a CPU while the median holds, so the
    mean wait cannot explain a p95; the tail's own passes can.

    The rise is the machine's when (1) those passes waited for a CPU enough more of their prefill time than
    the baseline's did to make them at least LOAD_MIN_STRETCH slower, (2) they prefilled no more prompt
    tokens than the baseline's passes there (or its q-quantile of tokens) beyond the allowance (a deploy that
    sends some calls a longer context), (3) the engine's own CPU work per prefill (the median over the
    passes) grew no more than busier_machine allows (a slower kernel), and (4) none of them shared the
    engine (waited for a running slot, or ran in a batch with another pass): a pass that had the engine to
    itself queued behind nothing. Passes that shared it may have queued: the rise must then be within the
    allowance with their prefill at the baseline's share of the CPU (the rest of their TTFT as it was).
    Without the per-pass readings on both sides (baselines written before them, hosted providers, foreign
    servers) there is nothing to read: None."""
    cs, bs = current.prefill_sample, baseline.prefill_sample
    cc, bc = current.prefill_cpu_ms, baseline.prefill_cpu_ms
    mean_cw, mean_bw = current.prefill_wait_share, baseline.prefill_wait_share
    if (min(len(cs), len(bs)) < MIN_CPU_PASSES or cc is None or bc is None or bc <= 0 or mean_cw is None
            or mean_bw is None):
        return None
    ct, bt = band_passes(cs, q), band_passes(bs, q)
    c_wall, b_wall = sum(p.wall_ms for p in ct), sum(p.wall_ms for p in bt)
    if c_wall <= 0 or b_wall <= 0:
        return None
    cw, bw = sum(p.wait_ms for p in ct) / c_wall, sum(p.wait_ms for p in bt) / b_wall
    if cw >= 1:
        return None
    stretch = (1 - bw) / (1 - cw)
    tokens = sum(p.tokens for p in ct) / len(ct)
    b_tokens = max(sum(p.tokens for p in bt) / len(bt), percentile([p.tokens for p in bs], q) or 0.0)
    shared = sum(1 for p in ct if p.shared)
    base_q = baseline.ttft_p95_ms if q > 0.5 else baseline.ttft_p50_ms
    cur_q = current.ttft_p95_ms if q > 0.5 else current.ttft_p50_ms
    ratio = low if low is not None else (cur_q or 0) / (base_q or 1)
    # at the baseline's share of the CPU the prefill of those passes is ``stretch`` times shorter; the rest of
    # their TTFT (a queue, the delivery) stays as it was
    at_base = ratio * sum(p.ttft_ms - p.wall_ms + p.wall_ms / stretch for p in ct) / max(
        sum(p.ttft_ms for p in ct), 1e-9)
    if (stretch < LOAD_MIN_STRETCH or tokens > b_tokens * (1 + limit)
            or cc > bc * (1 + limit + max(0.0, mean_cw - mean_bw)) or (shared and at_base > 1 + limit)):
        return None
    which = f"{len(ct)} slowest passes" if q > 0.5 else f"{len(ct)} passes at the median"
    queue = (f"{shared} of them shared the engine with other passes, and at the baseline's share of the CPU the "
             f"rise is {at_base - 1:+.0%}" if shared else "none of them shared the engine with another pass")
    return (f"the machine was busier, not the deploy slower: the server's engine waited for a CPU {cw:.0%} of the "
            f"prefill time of the {which} (the baseline's: {bw:.0%}), which alone makes them {stretch:.1f}x "
            f"slower; they prefilled {tokens:.0f} prompt tokens each (baseline {b_tokens:.0f}), {queue}, and the "
            f"engine's own CPU work per prefill was {cc:.1f} ms (baseline {bc:.1f} ms)")


_EXPLAINERS = {"cache_hit_rate": ("cost_after_deploy", "slow_first_token", "eviction_under_load"),
               "ttft_p50_ms": ("slow_first_token", "degrades_under_traffic"),
               "ttft_p95_ms": ("slow_first_token", "degrades_under_traffic"),
               "cost_per_request_usd": ("cost_after_deploy", "slow_first_token", "agent_loops"),
               "billed_tokens_per_request": ("cost_after_deploy", "slow_first_token", "agent_loops")}


def explain(q: Query, verdicts: list[Verdict]) -> list[Verdict]:
    """Attach to each failed verdict the best finding of the analyzers that explain that metric."""
    from dataclasses import replace

    from llmtrace.analyzers.core.concurrent_run import analyze_all
    from llmtrace.analyzers.core.merge import merge_findings
    from llmtrace.analyzers.diagnose.registry import ANALYZERS

    # every analyzer a failed verdict needs, run once (in threads: analyzers/core/concurrent_run.py)
    needed = list(dict.fromkeys(s for v in verdicts if not v.ok for s in _EXPLAINERS.get(v.metric, ())))
    cache = dict(zip(needed, analyze_all(q, [ANALYZERS[s] for s in needed]), strict=True))
    out = []
    for v in verdicts:
        if v.ok:
            out.append(v)
            continue
        found = merge_findings([f for s in _EXPLAINERS.get(v.metric, ()) for f in cache[s]])
        out.append(replace(v, explanation=found[0] if found else None))  # one cause, one explanation (best first)
    return out


def hit_rate_from_prompts(q: Query, verdicts: list[Verdict], deploy: str | None) -> list[Verdict]:
    """A hit rate the instrumentation could not measure (no cached-token counts: openai-v2 records none) is
    still a regression when the prompts show the cache breaking at the candidate deploy: a cache finding
    (read from the prompt hashes, as ``diagnose`` reads it) whose passes are all the candidate's. Only
    between two deploys of one store: a baseline file kept no prompts to compare with."""
    from dataclasses import replace

    from llmtrace.analyzers.core.concurrent_run import analyze_all
    from llmtrace.analyzers.core.merge import merge_findings
    from llmtrace.analyzers.diagnose.registry import ANALYZERS

    at = next((i for i, v in enumerate(verdicts) if v.metric == "cache_hit_rate" and v.skipped), None)
    if at is None or deploy is None:
        return verdicts
    found = merge_findings([f for fs in analyze_all(q, [ANALYZERS[s] for s in _EXPLAINERS["cache_hit_rate"]])
                            for f in fs])
    for f in found:
        # the cache finding says "since deploy X" only when every pass of its cause is X's (cache_findings.py);
        # its quoted traces are a sample, checked as well
        if (f.severity == "info" or f.stage not in (S.CACHE_PREFIX_MATCH, S.INTAKE_NORMALIZATION)
                or not f.trace_ids or f"since deploy {deploy} " not in f.title + " "):
            continue
        marks = ", ".join("?" for _ in f.trace_ids)
        seen = {r["deploy"] for r in q.rows(f"SELECT DISTINCT deploy FROM {q.passes} WHERE trace_id IN ({marks})",
                                            list(f.trace_ids))}
        if seen == {deploy}:
            out = list(verdicts)
            out[at] = replace(verdicts[at], ok=False, skipped=None, explanation=f,
                              limit="cached tokens not recorded; the prompts show the cache breaking at this deploy")
            return out
    return verdicts


@dataclass(frozen=True, slots=True)
class GateRun:
    """What one run of the gate decided, for what a layer above the analyzers draws of it (``llmtrace check
    --html``: the report's regression page, llmtrace/check_cmd.py), while the run's store is still open."""

    query: Query
    header: str
    verdicts: tuple[Verdict, ...]
    current: Metrics
    baseline: Metrics
    against: str  # "baseline FILE" or "deploy NAME"
    baseline_deploy: str | None  # the baseline deploy, when the baseline is one in the same store


def run(args: argparse.Namespace, after: Callable[[GateRun], None] | None = None) -> int:
    """The gate. ``after``: called with the run's decision before the verdicts print (the HTML artifact)."""
    from llmtrace.analyzers.diagnose.diagnose_cli import parse_since
    from llmtrace.tracer.storage.store import read_store

    try:
        since = parse_since(args.since)
        baseline_file = load_baseline(args.baseline) if args.baseline else None
    except ValueError as exc:
        print(f"llmtrace check: {exc}", file=sys.stderr)
        return 2
    try:
        with read_store(args.db, args.parquet, store=getattr(args, "store", None),
                        env_store=True) as conn:
            return _check(args, Query(conn, since, args.service), baseline_file, after)
    except (StoreError, ValueError) as exc:  # ValueError: no baseline to compare with (see _check)
        print(f"llmtrace check: {exc}", file=sys.stderr)
        return 2


def _check(args: argparse.Namespace, q: Query, baseline_file: Metrics | None,
           after: Callable[[GateRun], None] | None = None) -> int:
    q.shareable()  # (before the pass table is built: the analyzers that explain a failure may then run in threads)
    q.materialize()
    try:
        deploy = args.deploy
        if args.baseline_deploy and deploy is None:
            deploy = latest_deploy(q)
        side = baseline_file.side if baseline_file is not None else None
        current = measure(q, deploy, side)
        if current.passes < max(1, args.min_passes):
            print(f"llmtrace check: only {current.passes} passes"
                  f"{' for deploy ' + deploy if deploy else ''} in the store (need {max(1, args.min_passes)})",
                  file=sys.stderr)
            return 2
        if args.save_baseline:
            save_baseline(args.save_baseline, current)
            hr = f"{current.hit_rate:.1%}" if current.hit_rate is not None else "n/a"
            print(f"llmtrace check: baseline written to {args.save_baseline} ({current.passes} passes, "
                  f"hit rate {hr})")
            return 0
        if baseline_file is not None:
            baseline, against = baseline_file, f"baseline {args.baseline}"
        elif args.baseline_deploy:
            name = args.baseline_deploy
            if name == "previous":
                names = deploys(q)
                if deploy not in names or names.index(deploy) == 0:
                    raise ValueError(f"no deploy before {deploy!r} in the store")
                name = names[names.index(deploy) - 1]
            baseline = measure(q, name, current.side)
            if baseline.passes == 0:
                raise ValueError(f"no passes for baseline deploy {name!r}; deploys in the store: "
                                 f"{', '.join(deploys(q)) or 'none'}")
            against = f"deploy {name}"
        else:
            raise ValueError("give --baseline FILE, --baseline-deploy NAME, or --save-baseline FILE")
        verdicts = compare(current, baseline, max_hit_drop=args.max_hit_rate_drop, ttft=args.ttft,
                           max_ttft_increase=args.max_ttft_increase, cost=args.cost,
                           max_cost_increase=args.max_cost_increase)
        verdicts = explain(q, verdicts)
        if args.baseline_deploy:
            verdicts = hit_rate_from_prompts(q, verdicts, deploy)
        header = (f"llmtrace check: {current.passes} passes{' of deploy ' + deploy if deploy else ''} "
                  f"against {against}")
        if after is not None:  # a CI artifact drawn above the analyzers (check --html: llmtrace/check_cmd.py)
            after(GateRun(q, header, tuple(verdicts), current, baseline, against,
                          baseline.deploy if args.baseline_deploy else None))
        report = FORMATS[args.format](verdicts, header)
        if args.output:
            Path(args.output).write_text(report, encoding="utf-8")
            sys.stdout.write(FORMATS["text"](verdicts, header))
        else:
            sys.stdout.write(report)
        if args.format != "github" and os.environ.get("GITHUB_ACTIONS") == "true":
            # under GitHub Actions an abstention is annotated whatever the format (a text run shows it too)
            sys.stdout.write("".join(inconclusive_annotation(v) + "\n" for v in verdicts if v.inconclusive))
        return exit_status(verdicts, getattr(args, "inconclusive", "inconclusive"))
    finally:
        q.release()


def exit_status(verdicts: Sequence[Verdict], mode: str = "inconclusive") -> int:
    """1 on a regression; else, where the gate abstained on a metric, EXIT_INCONCLUSIVE (or what ``mode``
    makes of it: fail 1, pass 0); else 0."""
    if mode not in INCONCLUSIVE_MODES:
        raise ValueError(f"--inconclusive must be one of {', '.join(INCONCLUSIVE_MODES)}")
    if not all(v.ok for v in verdicts):
        return 1
    if any(v.inconclusive for v in verdicts):
        return {"inconclusive": EXIT_INCONCLUSIVE, "fail": 1, "pass": 0}[mode]
    return 0
