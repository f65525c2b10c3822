"""Fine in dev, bad under traffic: Arrival. Requests shed or queued by admission control, goodput (the
share of requests inside the TTFT objective) falling as concurrency rises, and preemptions when the KV
pool runs dry."""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.flag_rule import FlagRule, Quote, flag_findings
from llmtrace.analyzers.core.query import Query, attr
from llmtrace.analyzers.core.targets import TTFT_ENV, targets
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry import stage_ids as S

SLO_FACTOR = 2.0  # the TTFT objective, absent one given: twice the TTFT of requests that did not queue
# HTTP answers that refuse a request for load, not for what it asked: rate limited (429), over capacity or
# a connection limit (503), Anthropic's overloaded (529); as a status code, or as the error type a foreign
# instrumentation names
REFUSED = ("429", "503", "529", "RateLimitError", "OverloadedError", "rate_limit_error", "overloaded_error")
MIN_REFUSED_SHARE = 0.1
# the cause key of calls turned away at admission: the failed-calls analyzer's rate-limited and overloaded
# findings share it, so one finding says it (analyzers/core/merge.py)
REFUSED_CAUSE = "admission:refused"


# sequences the engine preempted when its KV pool ran dry, as a count of flagged allocation spans
PREEMPTED = FlagRule(
    S.CACHE_BLOCK_ALLOCATION, {"pre": N.BLOCKS_PREEMPTIONS, "util": N.BLOCKS_UTILIZATION},
    where="pre > 0", aggs="median(coalesce(util, 0)) AS util", severity="warning",
    title="{n} passes were preempted when the KV pool ran dry",
    summary="A preempted sequence gives up its blocks and recomputes them later, stretching its latency.",
    evidence=(Quote("preempted passes", "n"), Quote("median pool utilization", "util")),
    next_check="Lower max_running or grow the KV pool.", score=0.4)


class DegradesUnderTraffic(SymptomAnalyzer):
    symptom = "degrades_under_traffic"

    def find(self, q: Query) -> list[Finding]:
        out: list[Finding] = []
        adm = q.stage_sql(S.ARRIVAL_ADMISSION, {
            "decision": N.ADMISSION_DECISION, "wait": N.ADMISSION_QUEUE_WAIT_MS,
            "depth": N.ADMISSION_QUEUE_DEPTH, "max_running": N.ADMISSION_MAX_RUNNING})
        queued = "(a.decision = 'queued' OR coalesce(a.wait, 0) > 0)"
        # the TTFT objective: the user's target where one is set (analyzers/core/targets.py), else twice the calm TTFT
        target = targets().ttft_ms
        calm_sql = (f"SELECT {float(target)!r} AS slo" if target is not None else
                    f"SELECT {SLO_FACTOR} * median(ttft_ms) AS slo FROM j WHERE coalesce(wait, 0) = 0")
        s = q.one(f"""
            WITH j AS (SELECT a.*, r.ttft_ms FROM {adm} a LEFT JOIN {q.passes} r ON r.server_span_id = a.parent_span_id),
                 calm AS ({calm_sql})
            SELECT count(*) AS n, count(*) FILTER (WHERE j.decision = 'shed') AS shed,
                   count(*) FILTER (WHERE {queued.replace('a.', 'j.')}) AS queued,
                   median(j.wait) FILTER (WHERE {queued.replace('a.', 'j.')}) AS wait,
                   max(j.depth) AS depth, max(j.max_running) AS max_running, any_value(calm.slo) AS slo,
                   count(*) FILTER (WHERE j.ttft_ms IS NOT NULL) AS timed,
                   count(*) FILTER (WHERE j.ttft_ms <= calm.slo) AS good,
                   count(*) FILTER (WHERE j.ttft_ms > calm.slo AND {queued.replace('a.', 'j.')}) AS queued_over,
                   (list(j.trace_id ORDER BY j.start_ns DESC) FILTER (WHERE j.decision = 'shed'))[1:5] AS shed_ids,
                   (list(j.trace_id ORDER BY j.wait DESC, j.start_ns DESC) FILTER (WHERE {queued.replace('a.', 'j.')}))[1:5] AS queued_ids
            FROM j CROSS JOIN calm""")
        n = int(s.get("n") or 0)
        if n >= 3:
            shed, n_queued = int(s["shed"] or 0), int(s["queued"] or 0)
            timed, slo = int(s["timed"] or 0), s["slo"]
            goodput = int(s["good"] or 0) / timed if timed and slo else None
            bad_share = (shed + n_queued) / n
            # harm against the user's target: the refused and the queued passes that breached it (a queue that
            # kept every pass within the target is the running limit's expected cost)
            harm = (shed + int(s["queued_over"] or 0)) / n if target is not None else bad_share
            if (shed or (n_queued and goodput is not None and goodput < 0.8)) and bad_share >= 0.1:
                shed_ids, queued_ids = tuple(s["shed_ids"] or ()), tuple(s["queued_ids"] or ())
                ids = (shed_ids + queued_ids)[:5]
                ev = [Evidence("requests shed", shed, f"of {n}", shed_ids),
                      Evidence("requests queued", n_queued, f"of {n}", queued_ids),
                      Evidence("median queue wait", s["wait"], "ms", queued_ids),
                      Evidence("max queue depth", s["depth"], "requests", ids),
                      Evidence("running limit", s["max_running"], "requests", ids)]
                if goodput is not None:
                    ev.append(Evidence("goodput (TTFT within objective)", round(goodput, 3), "", baseline=1.0))
                    ev.append(Evidence("TTFT objective used" + (f" ({TTFT_ENV})" if target is not None else
                                                                  f" ({SLO_FACTOR:g}x the calm TTFT)"),
                                       round(float(s["slo"]), 1), "ms"))
                out.append(self.finding(
                    S.ARRIVAL_ADMISSION, severity_for(harm, 0.2, 0.5),
                    f"Under load {bad_share:.0%} of requests were queued or shed",
                    "Admission control held requests back once the running limit was reached; their wait is all "
                    "time to first token, and shed requests failed outright.",
                    ev, ids, "Compare queue_depth and running with max_running; add replicas or raise the running "
                    "limit if the KV pool has room (cache.block_allocation utilization).", 0.5 + 0.5 * bad_share,
                    cause=REFUSED_CAUSE if shed else "",
                ))
        if not any(f.stage == S.ARRIVAL_ADMISSION for f in out):
            out += self._refused(q)
        return out + flag_findings(self, q, (PREEMPTED,))

    def _refused(self, q: Query) -> list[Finding]:
        """Requests the client saw refused for load (REFUSED): a server in front of the engine (a connection
        limit, a gateway) or a hosted provider sheds them before any admission span is written, so only the
        client's pass says so."""
        tally = q.one(f"SELECT count(*) FILTER (WHERE client_span_id IS NOT NULL) AS n, "
                      f"count(*) FILTER (WHERE client_span_id IS NOT NULL AND status = 'error') AS errors FROM {q.passes}")
        n, errors = int(tally.get("n") or 0), int(tally.get("errors") or 0)
        if n < 3 or errors < 2 or errors < MIN_REFUSED_SHARE * n:
            return []
        code = f"coalesce({attr(sc.HTTP_RESPONSE_STATUS_CODE)}, {attr(sc.ERROR_TYPE)})"
        codes = ", ".join(f"'{c}'" for c in REFUSED)
        r = q.one(f"""
            WITH e AS (SELECT trace_id, start_ns, {code} AS code FROM {q.spans}
                       WHERE span_id IN (SELECT client_span_id FROM {q.passes}
                                         WHERE client_span_id IS NOT NULL AND status = 'error'))
            SELECT count(*) FILTER (WHERE code IN ({codes})) AS refused,
                   list(DISTINCT code) FILTER (WHERE code IN ({codes})) AS codes,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE code IN ({codes})))[1:5] AS ids
            FROM e""")
        refused = int(r.get("refused") or 0)
        share = refused / n
        if refused < 2 or share < MIN_REFUSED_SHARE:
            return []
        seen = sorted(str(c) for c in r["codes"] or ())
        ids = tuple(r["ids"] or ())
        return [self.finding(
            S.ARRIVAL_ADMISSION, severity_for(share, 0.2, 0.5),
            f"{refused} of {n} requests were refused for load (HTTP {', '.join(seen)})",
            "The server turned requests away before running them: a rate limit (429), a concurrency or "
            "connection limit (503) or an overloaded provider (529). Each refused request failed or waited out "
            "its client's retries.",
            [Evidence("requests refused", refused, f"of {n}", ids),
             Evidence("HTTP status", ", ".join(seen), "", ids)],
            ids, "Send fewer requests at once (a client-side limit or queue), raise the server's concurrency "
            "limit or its rate limit, and retry with backoff.", 0.5 + 0.5 * share, cause=REFUSED_CAUSE,
        )]
