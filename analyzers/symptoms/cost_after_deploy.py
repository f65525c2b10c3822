"""Cost up after a deploy: Cache → Meters.

Hit rate (cached over prompt tokens) per deploy, in the order deploys first appear, over every service's
passes of a deploy (the numbers `check` and the explorer's Cache tab give); where that finds nothing, each
service's deploys against that service's own (two apps that share deploy names, one hiding the other's
drop or rise, as `diagnose --service` would see it); the deploy where it fell; the prompt segment whose hash
started changing every call at that deploy (client segments, or the system-prompt volatile field); and cost
per request on both sides. Usage invariants ride along: a bill
computed from impossible token counts is its own cost problem.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from llmtrace.analyzers.cache.cache_findings import window_cause
from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.billing import BILLED_SQL, OUTPUT_WEIGHT
from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, Row, attr, sample_ids
from llmtrace.analyzers.core.stats import bootstrap_drop, quantile_ratio_low
from llmtrace.analyzers.symptoms.usage_invariants import usage_problems
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.views import PASS_OPERATIONS, hit_rate_sql

MIN_PASSES = 3  # per deploy
DROP = 0.05  # absolute fall in hit rate worth a finding, when it is also beyond resampling noise
BOOT_SAMPLE = 400  # recent passes per deploy the bootstrap resamples
SAMPLE = 2000  # passes per deploy read for segment volatility
RISE = 0.25  # a rise in cost (or billed tokens) per request worth a finding, when beyond resampling noise


def _grouping(per_service: bool) -> tuple[str, str, str]:
    """The service column, the GROUP BY prefix and the ORDER BY suffix: one row per deploy over every service
    (the service ''; ClickHouse would read ``service`` in ORDER BY as the column, not that constant), or one
    per service and deploy."""
    return ("service", "service, ", ", service") if per_service else ("'' AS service", "", "")


def hit_rates_by_deploy(q: Query, per_service: bool = False) -> list[Row]:
    """Rows of service, deploy, passes, hit_rate, cost_per_request, first_ns, trace_ids over the logical passes,
    one per deploy (the numbers `check` and the explorer's Cache tab give), or with ``per_service`` one per
    service and deploy; oldest first."""
    col, group, order = _grouping(per_service)
    return q.rows(f"""
        SELECT {col}, coalesce(deploy, '(none)') AS deploy, count(*) AS passes,
               {hit_rate_sql()} AS hit_rate,
               avg(cost_usd) AS cost_per_request, min(start_ns) AS first_ns,
               list(trace_id ORDER BY start_ns DESC)[1:5] AS trace_ids,
               (list([cached_tokens, prompt_tokens] ORDER BY start_ns DESC) FILTER (WHERE cached_tokens IS NOT NULL))
                   [1:{BOOT_SAMPLE}] AS tokens
        FROM {q.passes} WHERE prompt_tokens > 0
        GROUP BY {group}coalesce(deploy, '(none)') ORDER BY first_ns{order}""")


def by_service(rows: list[Row]) -> list[list[Row]]:
    """Rows of several services' deploys (oldest first) as one list per service, each still oldest first, the
    services in the order they first appear."""
    out: dict[object, list[Row]] = {}
    for r in rows:
        out.setdefault(r["service"], []).append(r)
    return list(out.values())


def _pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """Each deploy with the one before it, of the same service."""
    return [p for svc in by_service(rows) for p in zip(svc, svc[1:], strict=False)]


@dataclass(frozen=True, slots=True)
class _Scope:
    """The service a finding is about, in a run over several (None: the run's one service, nothing to add)."""

    service: str | None = None

    @staticmethod
    def of(rows: list[Row], row: Row) -> _Scope:
        return _Scope(row["service"]) if len({r["service"] for r in rows}) > 1 else _Scope()

    def passes(self) -> tuple[str, list[object]]:
        """SQL to add to a WHERE over the pass table, and its parameters."""
        return ("", []) if self.service is None else (" AND service = ?", [self.service])

    def title(self, text: str) -> str:
        return text if self.service is None else f"{text} (service {self.service})"

    def cause(self, cause: str) -> str:
        return cause if self.service is None else f"{cause}@{self.service}"

    def flag(self) -> str:
        return "" if self.service is None else f" --service {self.service}"


class CostAfterDeploy(SymptomAnalyzer):
    symptom = "cost_after_deploy"

    def find(self, q: Query) -> list[Finding]:
        out = self._deploys(q)
        if not out:  # a hit rate that fell explains (and prices) the rise itself
            out += self._cost_rise(q)
        out += self._usage(q)
        return out

    def _cost_rise(self, q: Query) -> list[Finding]:
        """Cost per request up at a deploy with the cache as good as before: the deploy asked for more
        (a longer prompt, a higher max_tokens that the answers now fill) or pays more per token (another
        model). Priced passes compare cost; unpriced ones compare the tokens a provider bills."""
        # every service's passes of a deploy together first (the numbers `check` gives); only when that finds
        # nothing, each service's deploys against its own (two apps that share deploy names, one hiding the other)
        for per_service in (False, True):
            rows, best = self._best_rise(q, per_service)
            if best is not None:
                break
        if best is None:
            return []
        rise, before, after, priced = best
        scope = _Scope.of(rows, after)
        rows = [r for r in rows if r["service"] == after["service"]]
        return self._rise_finding(q, rows, rise, before, after, priced, scope)

    def _best_rise(self, q: Query, per_service: bool) -> tuple[list[Row], tuple[float, Row, Row, bool] | None]:
        col, group, order = _grouping(per_service)
        rows = q.rows(f"""
            SELECT {col}, coalesce(deploy, '(none)') AS deploy, count(*) AS passes, min(start_ns) AS first_ns,
                   count(cost_usd) AS priced, avg(cost_usd) AS cost,
                   avg(prompt_tokens - least(coalesce(cached_tokens, 0), prompt_tokens)) AS uncached,
                   avg(prompt_tokens) AS prompt, avg(coalesce(output_tokens, 0)) AS output,
                   median(max_tokens) AS max_tokens,
                   list(DISTINCT coalesce(response_model, model)) FILTER (WHERE coalesce(response_model, model)
                                                                          IS NOT NULL) AS models,
                   list(trace_id ORDER BY start_ns DESC)[1:5] AS trace_ids,
                   (list(cost_usd ORDER BY start_ns DESC) FILTER (WHERE cost_usd IS NOT NULL))[1:{BOOT_SAMPLE}] AS costs,
                   (list({BILLED_SQL} ORDER BY start_ns DESC))
                       [1:{BOOT_SAMPLE}] AS tokens
            FROM {q.passes} WHERE prompt_tokens > 0
            GROUP BY {group}coalesce(deploy, '(none)') ORDER BY first_ns{order}""")
        rows = [r for r in rows if int(r["passes"]) >= MIN_PASSES]
        best: tuple[float, Row, Row, bool] | None = None
        for before, after in _pairs(rows):
            priced = int(before["priced"]) >= MIN_PASSES and int(after["priced"]) >= MIN_PASSES \
                and float(before["cost"] or 0) > 0
            key = "costs" if priced else "tokens"
            # control before blame: the median per request must have risen when both deploys' passes are
            # resampled, not only in the two means (one long answer is not a deploy's doing)
            low = quantile_ratio_low([float(x) for x in after[key]], [float(x) for x in before[key]], 0.5)
            if priced:
                rise = float(after["cost"]) / float(before["cost"]) - 1
            else:
                # no price: every prompt token is billed (cached ones at a discount), answer tokens at 4x
                b = float(before["prompt"] or 0) + OUTPUT_WEIGHT * float(before["output"] or 0)
                a = float(after["prompt"] or 0) + OUTPUT_WEIGHT * float(after["output"] or 0)
                rise = a / b - 1 if b else 0.0
            if rise >= RISE and low is not None and low > 1 + RISE / 2 and (best is None or rise > best[0]):
                best = (rise, before, after, priced)
        return rows, best

    def _rise_finding(self, q: Query, rows: list[Row], rise: float, before: Row, after: Row, priced: bool,
                      scope: _Scope) -> list[Finding]:
        ids = tuple(after["trace_ids"])
        ev = []
        if priced:
            ev.append(Evidence("cost per request", round(float(after["cost"]), 6), "USD", ids,
                               baseline=round(float(before["cost"]), 6)))
        ev += [Evidence("deploy where it rose", after["deploy"], "", ids, baseline=before["deploy"]),
               Evidence("control group", f"the {before['passes']} passes of deploy {before['deploy']}"),
               Evidence("prompt tokens per request", round(float(after["prompt"] or 0), 1), "tokens", ids,
                        baseline=round(float(before["prompt"] or 0), 1)),
               Evidence("uncached prompt tokens per request", round(float(after["uncached"] or 0), 1), "tokens", ids,
                        baseline=round(float(before["uncached"] or 0), 1)),
               Evidence("output tokens per request", round(float(after["output"] or 0), 1), "tokens", ids,
                        baseline=round(float(before["output"] or 0), 1))]
        # what moved most: the model (price per token), the answers (output), or the prompt
        by_users = False
        models_b, models_a = sorted(before["models"] or []), sorted(after["models"] or [])
        grow = {what: float(after[what] or 0) / max(1.0, float(before[what] or 0)) for what in ("output", "prompt")}
        if models_a != models_b and priced and max(grow.values()) < 1 + RISE:
            moved, stage = f"the model changed ({', '.join(models_b)} → {', '.join(models_a)})", S.ARRIVAL_MODEL_ROUTING
            ev.append(Evidence("models", models_a, "", ids, baseline=models_b))
        elif grow["output"] >= grow["prompt"]:
            moved, stage = "answers got longer", S.GEN_STOP
            if after["max_tokens"] is not None and before["max_tokens"] is not None:
                ev.append(Evidence("max_tokens (median)", after["max_tokens"], "tokens", ids,
                                   baseline=before["max_tokens"]))
                if float(after["max_tokens"]) > float(before["max_tokens"]):
                    moved = f"answers got longer (max_tokens {before['max_tokens']:.0f} → {after['max_tokens']:.0f})"
        else:
            moved, stage = "prompts got longer", S.INTAKE_SYSTEM_PROMPT
            growth = self._segment_growth(q, str(before["deploy"]), str(after["deploy"]), scope)
            if growth is not None:
                app, users, parts = growth
                ev.append(Evidence("growth of the app's own prompt parts (system, tools, history)", round(app), "chars"))
                ev.append(Evidence("growth of the users' own turns", round(users), "chars"))
                part, most = max(parts.items(), key=lambda kv: kv[1], default=("", 0.0))
                if app <= 0.25 * max(1.0, app + users):
                    # the traffic changed, not what the deploy sends: reported, not blamed on the deploy
                    moved, stage, by_users = "the users' own turns got longer", S.INTAKE_TOKENIZATION, True
                elif part and most >= 0.5 * app:  # one part of what the app sends explains it: name that part
                    ev.append(Evidence(f"growth of the {part} per request", round(most), "chars"))
                    moved = f"prompts got longer (the {part} grew by ~{most:,.0f} chars)"
                    if part == "history":
                        stage = S.INTAKE_CONTEXT_ORDERING  # more earlier turns sent along
        what = "Cost per request" if priced else "Billed tokens per request"
        severity: Severity = "info" if by_users else "critical" if rise >= 1.0 else "warning"
        return [self.finding(
            S.METERS_CACHE_ACCOUNTING, severity,
            scope.title(f"{what} rose {rise:.0%} at deploy {after['deploy']}: {moved}"),
            f"The cache serves as much of each prompt as under {before['deploy']}; deploy {after['deploy']} pays "
            "for more per call" + ("" if priced else " (no price is known for this model: counted in tokens, an "
                                   f"answer token as {OUTPUT_WEIGHT:g} prompt tokens)") + ".",
            ev, ids,
            "Diff the two deploys' request parameters at the stage named here (max_tokens, the prompt, the model); "
            f"gate it with `llmtrace check --cost --baseline-deploy {before['deploy']}{scope.flag()}`.",
            min(1.0, 0.5 + 0.25 * rise), cause=scope.cause(f"deploy-cost:{after['deploy']}"),
            stages=(S.METERS_CACHE_ACCOUNTING, stage),
            affected_share=int(after["passes"]) / max(1, sum(int(d["passes"]) for d in rows)),
        )]

    def _deploys(self, q: Query) -> list[Finding]:
        # every service's passes of a deploy together first (the hit rate `check` and the Cache tab give); only
        # when that finds no drop, each service's deploys against its own
        for per_service in (False, True):
            deploys = [d for d in hit_rates_by_deploy(q, per_service)
                       if int(d["passes"]) >= MIN_PASSES and d["hit_rate"] is not None]
            worst = self._worst_drop(deploys)
            if worst is not None:
                break
        if worst is None:
            return []
        return self._drop_finding(q, deploys, *worst)

    @staticmethod
    def _worst_drop(deploys: list[Row]) -> tuple[float, Row, Row] | None:
        worst: tuple[float, Row, Row] | None = None
        for before, after in _pairs(deploys):
            drop = float(before["hit_rate"]) - float(after["hit_rate"])
            if drop < DROP or (worst is not None and drop <= worst[0]):
                continue
            # control before blame: the earlier deploy is the control group, and the fall must hold when
            # the passes of both are resampled (a bootstrap), not just in the two point estimates
            _, low = bootstrap_drop([(float(c), float(t)) for c, t in before["tokens"]],
                                    [(float(c), float(t)) for c, t in after["tokens"]])
            if low > 0.5 * DROP:
                worst = (drop, before, after)
        return worst

    def _drop_finding(self, q: Query, deploys: list[Row], drop: float, before: Row, after: Row) -> list[Finding]:
        scope = _Scope.of(deploys, after)
        deploys = [d for d in deploys if d["service"] == after["service"]]
        ids = tuple(after["trace_ids"])
        ev = [Evidence(f"hit rate at {d['deploy']}", round(float(d["hit_rate"]), 3), "", tuple(d["trace_ids"]))
              for d in deploys]
        ev.append(Evidence("deploy where it fell", after["deploy"], "", ids, baseline=before["deploy"]))
        ev.append(Evidence("control group", f"the {before['passes']} passes of deploy {before['deploy']}"))
        if after["cost_per_request"] is not None and before["cost_per_request"] is not None \
                and (after["cost_per_request"] or before["cost_per_request"]):  # no price known: both zero
            ev.append(Evidence("cost per request", round(float(after["cost_per_request"]), 6), "USD", ids,
                               baseline=round(float(before["cost_per_request"]), 6)))
        moved = self._segment_that_moved(q, str(before["deploy"]), str(after["deploy"]), scope)
        because, cause = "", f"deploy-drop:{after['deploy']}"
        if moved is not None:
            seg, ratio_before, ratio_after, seg_ids = moved
            ev.append(Evidence(f"distinct '{seg}' segment hashes per pass", round(ratio_after, 2), "", seg_ids,
                               baseline=round(ratio_before, 2)))
            because = f": the {seg} segment started changing every call"
            cause = window_cause(seg.split("#")[0])
        volatile = self._volatile_moved(q, str(after["deploy"]), scope)
        if volatile is not None:
            ev.append(Evidence("volatile field in the system prompt", volatile[0], "", volatile[1]))
            because = because or f": the system prompt gained a volatile field ({volatile[0]})"
            cause = cause if moved is not None else window_cause("system")
        return [self.finding(
            S.CACHE_PREFIX_MATCH, "critical" if drop >= 0.3 else "warning",
            scope.title(f"Cache hit rate fell from {float(before['hit_rate']):.0%} to {float(after['hit_rate']):.0%} "
                        f"at deploy {after['deploy']}{because}"),
            f"Passes after deploy {after['deploy']} reuse far less of their prompts from the prefix cache than "
            f"under {before['deploy']}, so every call pays for more uncached prompt tokens.",
            ev, ids,
            "Diff the prompt assembly between the two deploys at the segment named here; run `llmtrace check "
            f"--baseline-deploy {before['deploy']}{scope.flag()}` in CI to catch it next time.",
            min(1.0, 0.5 + drop), cause=scope.cause(cause), stages=(S.CACHE_PREFIX_MATCH, S.METERS_CACHE_ACCOUNTING),
            affected_share=int(after["passes"]) / max(1, sum(int(d["passes"]) for d in deploys)),
        )]

    def _segment_growth(self, q: Query, before: str, after: str, scope: _Scope
                        ) -> tuple[float, float, dict[str, float]] | None:
        """(growth of the app's own prompt parts, growth of the users' turns, growth of each app part: system,
        tools, history), mean chars per pass from the recorded prompt segments of both deploys; None where no
        segments were recorded."""
        svc, args = scope.passes()
        rows = q.rows(f"""
            WITH pick AS (
                SELECT client_span_id AS span_id, coalesce(deploy, '(none)') AS deploy FROM {q.passes}
                WHERE client_span_id IS NOT NULL AND coalesce(deploy, '(none)') IN (?, ?){svc}
                QUALIFY row_number() OVER (PARTITION BY coalesce(deploy, '(none)') ORDER BY start_ns DESC) <= {SAMPLE})
            SELECT pick.deploy, {attr(N.PROMPT_SEGMENTS, column='s.attributes')} AS segs
            FROM {q.spans} s JOIN pick USING (span_id) WHERE s.operation IN {PASS_OPERATIONS}""", [before, after, *args])
        sums: dict[str, list[float]] = {before: [0.0, 0.0, 0.0], after: [0.0, 0.0, 0.0]}  # app, users, passes
        part_sums: dict[str, dict[str, float]] = {before: {}, after: {}}
        for r in rows:
            try:
                segs = json.loads(str(r["segs"])) if r["segs"] is not None else None
            except ValueError:
                segs = None
            if not isinstance(segs, list):
                continue
            acc, by_part = sums[str(r["deploy"])], part_sums[str(r["deploy"])]
            for seg in segs:
                if isinstance(seg, dict):
                    kind, chars = str(seg.get("kind")), float(seg.get("chars") or 0)
                    acc[1 if kind == "user" else 0] += chars
                    if kind != "user":
                        part = kind.split(":", 1)[0]
                        by_part[part] = by_part.get(part, 0.0) + chars
            acc[2] += 1
        if sums[before][2] < MIN_PASSES or sums[after][2] < MIN_PASSES:
            return None
        mean = {d: (v[0] / v[2], v[1] / v[2]) for d, v in sums.items()}
        parts = {p: part_sums[after].get(p, 0.0) / sums[after][2] - part_sums[before].get(p, 0.0) / sums[before][2]
                 for p in set(part_sums[after]) | set(part_sums[before])}
        return mean[after][0] - mean[before][0], mean[after][1] - mean[before][1], parts

    def _segment_that_moved(self, q: Query, before: str, after: str, scope: _Scope
                            ) -> tuple[str, float, float, tuple[str, ...]] | None:
        svc, args = scope.passes()
        rows = q.rows(f"""
            WITH pick AS (
                SELECT client_span_id AS span_id, coalesce(deploy, '(none)') AS deploy FROM {q.passes}
                WHERE client_span_id IS NOT NULL AND coalesce(deploy, '(none)') IN (?, ?){svc}
                QUALIFY row_number() OVER (PARTITION BY coalesce(deploy, '(none)') ORDER BY start_ns DESC) <= {SAMPLE})
            SELECT pick.deploy, s.trace_id, {attr(N.PROMPT_SEGMENTS, column='s.attributes')} AS segs
            FROM {q.spans} s JOIN pick USING (span_id)
            WHERE s.operation IN {PASS_OPERATIONS} ORDER BY s.start_ns DESC, s.span_id""", [before, after, *args])
        rows = [r for r in rows if r["segs"] is not None]
        hashes: dict[tuple[str, str], set[str]] = defaultdict(set)
        counts: dict[tuple[str, str], int] = defaultdict(int)
        ids: dict[str, list[str]] = defaultdict(list)
        for r in rows:
            try:
                segs = json.loads(str(r["segs"]))
            except ValueError:
                continue
            seen: dict[str, int] = defaultdict(int)
            for s in segs if isinstance(segs, list) else []:
                if not isinstance(s, dict) or s.get("kind") == "user":
                    continue  # user turns change by nature
                kind = str(s.get("kind"))
                seen[kind] += 1
                label = kind if seen[kind] == 1 else f"{kind}#{seen[kind]}"
                hashes[(str(r["deploy"]), label)].add(str(s.get("hash")))
                counts[(str(r["deploy"]), label)] += 1
                if r["deploy"] == after:
                    ids[label].append(str(r["trace_id"]))
        best: tuple[str, float, float, tuple[str, ...]] | None = None
        for (dep, label), n in counts.items():
            if dep != after or n < MIN_PASSES:
                continue
            ratio_after = len(hashes[(after, label)]) / n
            n_before = counts.get((before, label), 0)
            ratio_before = len(hashes[(before, label)]) / n_before if n_before else 1.0
            if ratio_after >= 0.5 and ratio_before <= 0.34 and (best is None or ratio_after - ratio_before > best[2] - best[1]):
                best = (label, ratio_before, ratio_after, sample_ids(ids[label]))
        return best

    def _volatile_moved(self, q: Query, after: str, scope: _Scope) -> tuple[str, tuple[str, ...]] | None:
        svc, args = scope.passes()
        # (a span is the service's when its trace has a pass of it: a server's stage spans carry its own name)
        mine = f" AND trace_id IN (SELECT trace_id FROM {q.passes} WHERE true{svc})" if svc else ""
        rows = q.rows(f"""
            SELECT trace_id, {attr(N.SYSTEM_VOLATILE_OFFSET)} AS off,
                   {attr(N.SYSTEM_VOLATILE_KIND)} AS kind
            FROM {q.spans} WHERE stage = '{S.INTAKE_SYSTEM_PROMPT}' AND coalesce(deploy, '(none)') = ?
              AND {attr(N.SYSTEM_VOLATILE_OFFSET)} >= 0{mine}
            ORDER BY start_ns DESC LIMIT 50""", [after, *args])
        if not rows:
            return None
        r = rows[0]
        return f"{r['kind']} at char {r['off']}", sample_ids([x["trace_id"] for x in rows])

    def _usage(self, q: Query) -> list[Finding]:
        out = []
        for p in usage_problems(q):
            out.append(self.finding(
                S.METERS_CACHE_ACCOUNTING, "warning" if p.kind != "local_mismatch" else "info",
                f"Token accounting is inconsistent: {p.detail}",
                f"{p.count} passes report usage that cannot be true or disagrees with the local count; costs "
                "computed from it are wrong.",
                [Evidence(p.detail, p.count, "passes", p.trace_ids)], p.trace_ids,
                "Check how the provider's usage is normalised (OpenAI counts cached tokens inside input tokens, "
                "Anthropic on top) in meters.cache_accounting.", 0.3,
            ))
        return out
