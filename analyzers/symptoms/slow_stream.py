"""Fast first token, slow stream: Forward → Generation.

Time per output token grows with the batch a sequence shares, the KV bytes each step reads, speculation
that stops paying off under load, thinking tokens, and a slow attention path. The analyzer splits passes
into slow-stream and normal ones (TPOT against the fast end of the distribution) and names the stage whose value differs most.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, Row
from llmtrace.analyzers.core.stats import mann_whitney_p
from llmtrace.analyzers.core.targets import TPOT_ENV, targets
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

SLOW_FACTOR = 2.0  # a pass is slow-stream when its TPOT is this many times the fast end (10th percentile)
MIN_GAP_MS = 2.0  # and at least this much slower per token: below it the difference is timer noise
MIN_PASSES = 6
SAMPLE = 3000  # passes per group whose stage values are read

# stage -> (alias, boundary value (its type the registry's), how it explains a slow stream)
CANDIDATES: tuple[tuple[str, str, str, str], ...] = (
    (S.FORWARD_BATCHING, "batch", N.BATCH_SIZE_MEAN,
     "the pass shared larger batches, so each step serves more sequences"),
    (S.FORWARD_DECODE, "kv_read", N.DECODE_KV_BYTES_READ,
     "each step read more KV bytes (longer contexts per sequence)"),
    (S.GEN_SPECULATION, "spec_accept", N.SPEC_ACCEPTANCE_RATE,
     "drafts were rejected more often, so speculation cost more than it saved"),
    (S.GEN_REASONING_BUDGET, "reasoning", N.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
     "the model spent many tokens thinking before the visible answer"),
)
# A value that is a pass's total is compared per step, as TPOT is per token: the KV bytes read over a whole
# pass grow with the tokens it generated (a raised max_tokens) though no step read more.
PER_STEP = {"kv_read": (N.DECODE_STEPS, "per decode step")}
# Work per step: a step's time grows at most in proportion to the work it does (the sequences it serves, the
# KV bytes it reads; the weights read each step only add a fixed part), so a candidate whose ratio is well
# short of the TPOT ratio cannot be the slow stream's cause. A busy machine slows every step of the passes it
# overlaps, and a multi-turn chat's context grows at the same time: KV 3x, TPOT 10x is load, not KV.
WORK_PER_STEP = frozenset({"batch", "kv_read"})
EXPLAIN_SLACK = 1.5  # the TPOT ratio a candidate's ratio may fall short of (timer and scheduling noise)
# Dose and response: where such a candidate spans a wide range inside the slow group itself, a real cause
# makes its slower passes the ones with more of it. Load that came at once while a chat's context grew all
# along leaves the slow passes' TPOT flat across their KV: not the cause, however large the groups' ratio.
DOSE_SPREAD = 1.5  # the slow group's 90th/10th percentile of the candidate from which it must be followed
# A slow stream costs its reader the extra time per token over the whole answer: a few tokens slower by tens
# of ms (a short answer beside a burst's prefills) lose a fraction of a second, never the critical finding
SMALL_LOSS_MS = 250.0  # extra streaming time per slow pass under which a finding is at most a warning
# ... and under which it is info: about the 0.1 s a delay takes to be noticed at all. Six concurrent tool
# calls of a clean agent on a tiny model streamed 16.4 vs 9.2 ms a token in a busy run, 36 ms per answer in all.
NEGLIGIBLE_LOSS_MS = 100.0
FEW_AT_NORMAL = 0.2  # the share of slow passes at a normal value the dose check leaves out (see _unfollowed)
MIN_FOLLOW = 0.3  # the rank correlation of TPOT with the candidate inside the slow group it must reach then


class SlowStream(SymptomAnalyzer):
    symptom = "slow_stream"

    def find(self, q: Query) -> list[Finding]:
        return self._speculation(q) + self._groups(q)

    def _speculation(self, q: Query) -> list[Finding]:
        """Speculation that runs under load: drafts are verified for a whole batch, so when most are rejected
        and batches are big, each step does more work than it saves. Judged per pass from the engine's own
        draft counts (drafted vs accepted), not against other passes."""
        rel = q.stage_sql(S.GEN_SPECULATION, {"method": N.SPEC_METHOD, "drafted": N.SPEC_DRAFTED,
                                              "accepted": N.SPEC_ACCEPTED, "batch": N.SPEC_BATCH_SIZE})
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE method IS NOT NULL AND method <> 'none') AS spec,
                             sum(drafted) AS drafted, sum(accepted) AS accepted,
                             median(batch) FILTER (WHERE drafted > 0) AS batch, any_value(method) FILTER (WHERE drafted > 0) AS how,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE drafted > 0))[1:5] AS ids
                      FROM {rel}""")
        n, spec = int(a.get("n") or 0), int(a.get("spec") or 0)
        drafted, accepted = int(a.get("drafted") or 0), int(a.get("accepted") or 0)
        batch = float(a.get("batch") or 0)
        if n < MIN_PASSES or spec < 0.5 * n or drafted < 20:
            return []
        rate = accepted / drafted
        if rate >= 0.5 or batch < 2:
            return []
        ids = tuple(a["ids"] or ())
        wasted = drafted - accepted
        return [self.finding(
            S.GEN_SPECULATION, "warning" if rate < 0.3 else "info",
            f"Speculation ({a['how']}) under load: {1 - rate:.0%} of drafted tokens were rejected at batch {batch:.1f}",
            f"{spec} of {n} passes ran speculative decoding while sharing batches of {batch:.1f}; only {rate:.0%} of "
            f"the {drafted} drafted tokens were accepted, so verification cost more than it saved.",
            [Evidence("passes with speculation on", spec, f"of {n}", ids),
             Evidence("draft acceptance rate", round(rate, 3), "", ids, baseline=0.5),
             Evidence("drafted tokens rejected", wasted, "tokens", ids),
             Evidence("median batch size while speculating", round(batch, 2), "", ids)],
            ids, "Turn speculation off above a batch size (or use a better draft); compare TPOT with it off.",
            min(1.0, 0.4 + (0.5 - rate)), cause="speculation-under-load", loss_tokens=float(wasted),
            affected_share=spec / n)]

    def _groups(self, q: Query) -> list[Finding]:
        """The passes split into slow-stream and normal ones, and the stage whose values tell them apart."""
        split = _Split.of(self._group_rows(q))
        if split is None:
            return []
        out, unexplained = self._candidates(q, split)
        fallback = self._fallback(split)
        out += [fallback] if fallback is not None else []
        if not out:
            out += self._nothing_stands_out(split, unexplained)
        return out

    @staticmethod
    def _group_rows(q: Query) -> list[Row]:
        """One row per group (slow or not): its count, median TPOT and output tokens, the newest quoted traces,
        and over a sample of its passes each candidate's median, values (and TPOT pairs), and attention
        fallbacks."""
        # Classify every pass from the requests table; read stage values for a sample of each group only
        # (the medians compared need a few thousand passes, not all of them).
        only = "AND parent_span_id IN (SELECT span_id FROM pick)"
        # the sampled passes' spans of every stage read here, in one scan of the store (``picked``), not one each
        stages = [c[0] for c in CANDIDATES] + [S.FORWARD_ATTENTION]
        src = None if q.exported else "picked"
        picked = "" if src is None else f"picked AS MATERIALIZED {q.stage_spans_sql(stages, only)},"
        joins = "\n".join(
            f"LEFT JOIN (SELECT parent_span_id, {_value(alias)} AS {alias} FROM "
            f"{q.stage_sql(stage, {alias: name, **({'steps': PER_STEP[alias][0]} if alias in PER_STEP else {})}, only, src)})"
            f" {alias}_t ON {alias}_t.parent_span_id = pick.span_id"
            for stage, alias, name, _ in CANDIDATES)
        att = q.stage_sql(S.FORWARD_ATTENTION, {"fallback": N.ATTENTION_FALLBACK, "backend": N.ATTENTION_BACKEND},
                          only, src)
        meds = ", ".join(f"median({alias}) AS {alias}, list({alias}) FILTER (WHERE {alias} IS NOT NULL) AS {alias}_vals"
                         for _, alias, _, _ in CANDIDATES)
        meds += "".join(f", list([pick.tpot_ms, {alias}::DOUBLE]) FILTER (WHERE {alias} IS NOT NULL) AS {alias}_pairs"
                        for alias in sorted(WORK_PER_STEP))
        return q.rows(f"""
            WITH r AS (SELECT coalesce(server_span_id, span_id) AS span_id, trace_id, tpot_ms, output_tokens,
                              start_ns FROM {q.passes} WHERE tpot_ms IS NOT NULL),
                 m AS (SELECT quantile_cont(tpot_ms, 0.1) AS base, count(*) AS n FROM r),
                 cls AS (SELECT r.*, r.tpot_ms >= {SLOW_FACTOR} * m.base AND r.tpot_ms - m.base >= {MIN_GAP_MS} AS slow,
                                m.n AS total FROM r CROSS JOIN m),
                 counts AS (SELECT slow, count(*) AS n, median(tpot_ms) AS tpot, median(output_tokens) AS output_tokens,
                                   (list(trace_id ORDER BY tpot_ms DESC))[1:5] AS ids FROM cls GROUP BY slow),
                 pick AS (SELECT * FROM cls QUALIFY row_number() OVER (PARTITION BY slow ORDER BY start_ns DESC) <= {SAMPLE}),
                 {picked}
                 vals AS (
                    SELECT pick.slow, {meds}, count(*) FILTER (WHERE att.fallback) AS fallbacks, count(*) AS sampled,
                           any_value(att.backend) FILTER (WHERE att.fallback) AS fallback_backend,
                           (list(pick.trace_id ORDER BY pick.tpot_ms DESC) FILTER (WHERE att.fallback))[1:5] AS fallback_ids
                    FROM pick {joins}
                    LEFT JOIN {att} att ON att.parent_span_id = pick.span_id
                    GROUP BY pick.slow)
            SELECT counts.*, vals.* EXCLUDE (slow), (SELECT any_value(total) FROM cls) AS total
            FROM counts JOIN vals USING (slow)""")

    def _candidates(self, q: Query, split: _Split) -> tuple[list[Finding], list[str]]:
        """A finding for each candidate whose values set the slow passes apart and could explain their TPOT, and
        the candidates that differ, but by far less than TPOT does (or that TPOT does not follow)."""
        slow_g, normal_g = split.slow, split.normal
        out: list[Finding] = []
        unexplained: list[str] = []  # candidates that differ, but by far less than TPOT does
        for stage, alias, name, why in CANDIDATES:
            a, b = slow_g[alias], normal_g[alias]
            if a is None or b is None:
                continue
            a, b = float(a), float(b)
            if a == b or (alias == "spec_accept" and b == 0):
                continue  # no difference, or no speculation on the normal passes to compare with
            # acceptance explains slowness when it is *lower*; the others when higher
            ratio = (b / a if a > 0 else 10.0) if alias == "spec_accept" else (a / b if b > 0 else (10.0 if a > 0 else 1.0))
            # control before blame: the two groups' values must differ beyond noise (a rank test over the
            # passes), not just in their medians
            p_value = mann_whitney_p(slow_g[f"{alias}_vals"] or [], normal_g[f"{alias}_vals"] or [])
            if ratio < 1.5 or p_value >= 0.05:
                continue
            if alias in WORK_PER_STEP and split.slow_tpot > EXPLAIN_SLACK * ratio * split.mid:
                unexplained.append(f"{alias} {ratio:.1f}x")
                continue  # too small a difference for the slowdown it would have to explain
            follow = (_unfollowed(slow_g[f"{alias}_pairs"], normal_g[f"{alias}_vals"])
                      if alias in WORK_PER_STEP else None)
            if follow is not None:
                unexplained.append(f"{alias} not followed by TPOT, rank correlation {follow:.2f}")
                continue
            score = min(1.0, split.share * 0.5 + min(1.0, (ratio - 1) / 3) * 0.5)
            name = f"{name} {PER_STEP[alias][1]}" if alias in PER_STEP else name
            chosen, stage_severity = self._chosen_cost(q, alias, split.slow_tpot, split.severity)
            out.append(self._candidate_finding(split, stage, stage_severity, name, why, chosen, (a, b, p_value), score))
        return out, unexplained

    def _candidate_finding(self, split: _Split, stage: str, severity: Severity, name: str, why: str, chosen: str,
                           values: tuple[float, float, float], score: float) -> Finding:
        """The finding for one candidate: ``values`` its slow and normal medians and the rank test's p-value."""
        a, b, p_value = values
        return self.finding(
            stage, severity,
            f"Slow-stream passes differ in {name} ({a:.3g} vs {b:.3g})",
            f"{split.n_slow} of {split.total} passes streamed at {split.slow_tpot:.1f} ms per token or worse against a "
            f"median of {split.mid:.1f} ms for the rest; {why}.{chosen}" + (
                f" In all it costs each slow pass about {split.extra_ms:.0f} ms, under the ~"
                f"{NEGLIGIBLE_LOSS_MS:.0f} ms a reader notices." if split.extra_ms < NEGLIGIBLE_LOSS_MS else ""),
            [split.base_ev, Evidence(name, a, "", split.ids, baseline=b),
             Evidence("rank-test p-value (slow vs the rest)", round(p_value, 5)),
             Evidence("control group", f"the {split.total - split.n_slow} passes at normal speed"),
             Evidence("extra streaming time per slow pass (about: the medians' extra TPOT × answer steps)",
                      round(split.extra_ms, 1), "ms", split.ids)], split.ids,
            # (no loss_ms: at one severity the other analyzers' causes, a queue, a cache miss, that slow a
            # burst's streams too carry none, and would sort under the symptom they explain)
            f"Open {stage} on the listed traces and compare {name} with a normal pass.", score,
            affected_share=split.share,
        )

    def _fallback(self, split: _Split) -> Finding | None:
        """Most sampled slow passes ran attention on a fallback kernel."""
        slow_g = split.slow
        fallbacks = int(slow_g["fallbacks"] or 0)
        if not (fallbacks and fallbacks / int(slow_g["sampled"]) >= 0.5):
            return None
        fids = tuple(slow_g["fallback_ids"])
        return self.finding(
            S.FORWARD_ATTENTION, "warning", "Slow-stream passes fell back to another attention kernel",
            f"{fallbacks} of {slow_g['sampled']} sampled slow-stream passes ran attention on a fallback path "
            f"({slow_g['fallback_backend']}).",
            [split.base_ev, Evidence("passes on a fallback kernel", fallbacks, f"of {slow_g['sampled']} sampled", fids)],
            fids, "Open forward.attention: read llmtrace.attention.reason for why the preferred kernel was skipped.",
            0.6,
        )

    def _nothing_stands_out(self, split: _Split, unexplained: list[str]) -> list[Finding]:
        """Many passes streamed far slower, and no stage's values explain it: an info finding, or none."""
        share, slow_tpot, mid = split.share, split.slow_tpot, split.mid
        if not (share >= 0.25 and slow_tpot >= 3 * mid and slow_tpot - mid >= 10 * MIN_GAP_MS):
            return []
        return [self.finding(
            S.FORWARD_DECODE, "info", f"{split.n_slow} passes streamed slower than the rest",
            "No batching, KV, speculation or kernel difference stands out"
            + (f" (those that differ, {', '.join(unexplained)}, are too small for a {slow_tpot / mid:.1f}x slower "
               "step; a busy machine slows every step)" if unexplained else "")
            + "; compare decode steps on the traces.",
            [split.base_ev, Evidence("median output tokens", split.slow["output_tokens"], "tokens", split.ids,
                                     baseline=split.normal["output_tokens"])], split.ids,
            "Open forward.decode and forward.batching on the listed traces.", 0.2 * share,
        )]

    def _chosen_cost(self, q: Query, alias: str, slow_tpot: float, severity: Severity) -> tuple[str, Severity]:
        """A batch's slowdown on a server the user made batch-invariant on purpose is that setting's expected
        cost (its kernels give up batch-size-tuned splits to keep answers the same): info, unless the streams
        breached a TPOT target the user set (analyzers/core/targets.py). Any candidate's slowdown is info when the user
        set a TPOT target the slow streams stay within: measured against the stated reference, no harm."""
        target = targets().tpot_ms
        if alias == "batch" and self._invariant(q):
            if target is not None and slow_tpot > target:
                return (f" The server runs batch-invariant kernels (a setting chosen on purpose), and the slow "
                        f"streams breach the TPOT target of {target:g} ms ({TPOT_ENV})."), severity
            return (" The server runs batch-invariant kernels on purpose: a slower step in a shared batch is that "
                    "setting's expected cost, and no TPOT target was breached"
                    + (f" ({target:g} ms)." if target is not None else f" (none set: {TPOT_ENV}).")), "info"
        # any other cause is harm by its share, unless the user set a TPOT target the slow streams stay within
        if target is not None and slow_tpot <= target:
            return (f" The slow streams stay within the TPOT target of {target:g} ms ({TPOT_ENV}), so the "
                    "slowdown breaches no target."), "info"
        return "", severity

    @staticmethod
    def _invariant(q: Query) -> bool:
        """Whether most passes' batches ran in batch-invariant mode."""
        r = q.one(f"""SELECT count(*) FILTER (WHERE inv) AS inv, count(*) AS n FROM
                      {q.stage_sql(S.FORWARD_BATCHING, {"inv": N.BATCH_INVARIANT_MODE})}""")
        n, inv = int(r.get("n") or 0), int(r.get("inv") or 0)
        return bool(n) and inv >= 0.5 * n


@dataclass(frozen=True, slots=True)
class _Split:
    """The slow-stream group beside the normal one, and what the slowdown cost."""
    slow: Row
    normal: Row
    n_slow: int
    total: int
    share: float
    slow_tpot: float
    mid: float  # the normal passes' median TPOT
    ids: tuple[str, ...]
    base_ev: Evidence
    extra_ms: float
    severity: Severity

    @staticmethod
    def of(groups: list[Row]) -> _Split | None:
        """The split, or None without both groups or with too few passes."""
        by = {bool(g["slow"]): g for g in groups}
        if True not in by or False not in by or int(by[True]["total"]) < MIN_PASSES:
            return None
        slow_g, normal_g = by[True], by[False]
        n_slow, total = int(slow_g["n"]), int(slow_g["total"])
        share = n_slow / total
        slow_tpot = float(slow_g["tpot"])
        ids = tuple(slow_g["ids"])
        mid = float(normal_g["tpot"])
        base_ev = Evidence("median TPOT of slow-stream passes", slow_tpot, "ms", ids, baseline=mid)
        # what the slowdown cost each slow pass's reader: the extra ms per token over its answer's steps
        extra_ms = max(0.0, slow_tpot - mid) * max(0.0, float(slow_g["output_tokens"] or 1) - 1)
        severity = severity_for(share, 0.2, 0.5)
        if severity == "critical" and extra_ms < SMALL_LOSS_MS:
            severity = "warning"
        if extra_ms < NEGLIGIBLE_LOSS_MS:
            severity = "info"
        return _Split(slow_g, normal_g, n_slow, total, share, slow_tpot, mid, ids, base_ev, extra_ms, severity)


def _value(alias: str) -> str:
    """A candidate's value in SQL over its stage relation (a total divided by the pass's steps, see PER_STEP)."""
    return f"{alias} / nullif(steps, 0)" if alias in PER_STEP else alias


def _unfollowed(pairs: list[list[float]] | None, normal: list[float] | None) -> float | None:
    """The rank correlation of TPOT with a candidate across the slow group's (tpot, value) pairs, when the
    value spans a wide range there (DOSE_SPREAD) and TPOT does not follow it (under MIN_FOLLOW); else None.

    A few slow passes at a normal value (at most FEW_AT_NORMAL of the group, at or under the normal passes'
    median: a lone pass that lost its CPU for a while) are slow for another reason and are left out: two such
    among sixteen full-batch passes made batching look "not followed" and left a clear batching slowdown
    unnamed. More of them than that are kept: then the candidate does not explain the slow group."""
    pts = [(float(t), float(v)) for t, v in pairs or () if t is not None and v is not None]
    usual = sorted(float(v) for v in normal or () if v is not None)
    if usual:
        mid = usual[len(usual) // 2]
        raised = [(t, v) for t, v in pts if v > mid]
        if len(pts) - len(raised) <= FEW_AT_NORMAL * len(pts):
            pts = raised
    if len(pts) < 5:
        return None
    vs = sorted(v for _, v in pts)
    lo, hi = vs[len(vs) // 10], vs[(9 * len(vs)) // 10]
    if lo <= 0 or hi / lo < DOSE_SPREAD:
        return None
    rho = _spearman([t for t, _ in pts], [v for _, v in pts])
    return rho if rho < MIN_FOLLOW else None


def _spearman(xs: list[float], ys: list[float]) -> float:
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sx = sum((a - mx) ** 2 for a in rx) ** 0.5
    sy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (sx * sy) if sx and sy else 0.0


def _ranks(xs: list[float]) -> list[float]:
    """Average ranks (ties share theirs)."""
    order = sorted(range(len(xs)), key=xs.__getitem__)
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2
        i = j + 1
    return out
