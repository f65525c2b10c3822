"""Slow first token, fast stream: Arrival → Cache → Forward.

The usual cause is prompt tokens the prefix cache could have served and did not: a volatile window (a
timestamp, an id, a per-user value, reordered examples) ahead of text that is otherwise identical, a replica
that did not hold the prefix, or prompts under the minimum cacheable prefix (analyzers/cache/cache_loss.py
measures it per pass). Other explanations checked: a queue in front of the engine, fresh connections, and
sequential tool calls that re-prefill.
"""

from __future__ import annotations

from llmtrace.analyzers.cache.cache_findings import cache_findings
from llmtrace.analyzers.cache.routed_away import routed_away
from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query, attr
from llmtrace.analyzers.core.targets import ttft_reading
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class SlowFirstToken(SymptomAnalyzer):
    symptom = "slow_first_token"

    def find(self, q: Query) -> list[Finding]:
        out: list[Finding] = cache_findings(self, q)  # cache losses need token counts, not a TTFT
        out += routed_away(self, q)  # a prefix-scoring router's own word (llm-d, Dynamo via collect)
        src = f"(SELECT * FROM {q.passes} WHERE ttft_ms IS NOT NULL)"
        n = q.one(f"SELECT count(*) AS n FROM {src}")["n"]
        if int(n) >= 3:
            out += self._queue(q, src)
        out += self._connection(q)
        out += self._fan_out(q)
        return out

    # ── arrival.admission ──────────────────────────────────────────────────────────────────
    def _queue(self, q: Query, src: str) -> list[Finding]:
        a = q.one(f"""
            SELECT count(*) AS n, count(*) FILTER (WHERE queue_wait_ms > 0) AS waited,
                   sum(least(1.0, coalesce(queue_wait_ms, 0) / nullif(ttft_ms, 0))) / count(*) AS share,
                   median(queue_wait_ms) FILTER (WHERE queue_wait_ms > 0) AS wait,
                   (list(trace_id ORDER BY queue_wait_ms DESC, start_ns DESC) FILTER (WHERE queue_wait_ms > 0))[1:5] AS ids
            FROM {src}""")
        waited = int(a["waited"] or 0)
        share = float(a["share"] or 0)
        wait = float(a["wait"] or 0)
        if not waited or share < 0.2 or wait < 10:
            return []
        ids = tuple(a["ids"] or ())
        severity, said, ev = severity_for(share, 0.3, 0.5), "", []
        target = ttft_reading(q, src)
        if target is not None:  # the user's target is the reference: a queue that breaches none costs no harm
            severity = severity_for(target.share_over, 0.1, 0.5) if target.breached else "info"
            said = f" {target.says()[0].upper()}{target.says()[1:]}."
            ev = [Evidence("passes over the TTFT target", target.over, f"of {target.timed}", ids,
                           baseline=target.target_ms)]
        return [self.finding(
            S.ARRIVAL_ADMISSION, severity, f"{share:.0%} of time to first token is queueing",
            f"{waited} of {a['n']} passes waited for a running slot (median {wait:.0f} ms) before "
            f"any prompt token was read.{said}",
            [Evidence("passes that queued", waited, f"of {a['n']}", ids),
             Evidence("median queue wait", wait, "ms", ids),
             Evidence("share of TTFT spent queueing", round(share, 3)), *ev],
            ids, "Open arrival.admission: compare queue_depth and max_running; raise the running limit or add "
            "a replica.", share,
        )]

    # ── arrival.connection ─────────────────────────────────────────────────────────────────
    def _connection(self, q: Query) -> list[Finding]:
        rel = q.stage_sql(S.ARRIVAL_CONNECTION, {"reused": N.CONNECTION_REUSED, "ms": N.CONNECTION_CONNECT_MS})
        a = q.one(f"SELECT count(*) AS n, count(*) FILTER (WHERE reused = false) AS fresh FROM {rel}")
        n, fresh = int(a["n"] or 0), int(a["fresh"] or 0)
        if n < 3 or fresh / n < 0.5:
            return []  # the cheap count first: the overlap test below only keeps some of the fresh ones
        # A fresh connection is the client's fault only when a pooled one was idle: an earlier call of the same
        # service had ended and none was still in flight. Concurrent calls each need a connection of their own,
        # and the first call has none to reuse (the control: calls that could not have reused one). Nor does a
        # call after a streamed one: the official SDKs (httpx) do not return a stream's connection to the pool
        # (one OpenAI client, four streams: four connections; four plain calls: one), and a busy machine makes
        # each of those connects slow enough to pass the bar below.
        streamed = attr(N.STREAM_REQUESTED, column="p.attributes")
        a = q.one(f"""
            WITH c AS (SELECT rel.trace_id, rel.reused, rel.ms, p.start_ns AS ps,
                              max(p.end_ns) OVER (PARTITION BY rel.service ORDER BY p.start_ns
                                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
                              coalesce(lag({streamed}) OVER (PARTITION BY rel.service ORDER BY p.start_ns), false)
                                AS after_stream
                       FROM {rel} rel JOIN {q.spans} p ON p.span_id = rel.parent_span_id),
                 f AS (SELECT *, reused = false AND prev_end IS NOT NULL AND prev_end <= ps AND NOT after_stream
                                 AS avoidable FROM c)
            SELECT count(*) AS n, count(*) FILTER (WHERE avoidable) AS fresh,
                   median(ms) FILTER (WHERE avoidable) AS ms,
                   (list(trace_id ORDER BY ps DESC) FILTER (WHERE avoidable))[1:5] AS ids FROM f""")
        n, fresh = int(a["n"] or 0), int(a["fresh"] or 0)
        ms = float(a["ms"] or 0)
        if n < 3 or fresh / n < 0.5 or ms < 20:
            return []
        share = fresh / n
        ids = tuple(a["ids"] or ())
        return [self.finding(
            S.ARRIVAL_CONNECTION, "warning", f"{share:.0%} of calls open a new connection ({ms:.0f} ms each)",
            "The client does not reuse pooled connections, so each call pays the connect (and TLS) time.",
            [Evidence("calls on a fresh connection", fresh, f"of {n}", ids),
             Evidence("median connect time", ms, "ms", ids)],
            ids, "Reuse one client object (and its connection pool) across calls.", 0.4 * share,
        )]

    # ── loop.fan_out ───────────────────────────────────────────────────────────────────────
    def _fan_out(self, q: Query) -> list[Finding]:
        """Sequential tool calls: each adds a pass whose first token waits on a prefill of what was appended.
        The re-prefilled tokens come from the fan-out span, or else from the turn's later passes (the
        prompt tokens they did not find cached)."""
        fo = q.stage_sql(S.LOOP_FAN_OUT, {"mode": N.FANOUT_MODE, "calls": N.FANOUT_CALLS, "passes": N.FANOUT_PASSES,
                                          "reprefill": N.FANOUT_REPREFILL_TOKENS})
        a = q.one(f"""
            WITH seq AS (SELECT * FROM {fo} WHERE mode = 'sequential' AND calls > 1),
                 later AS (
                    SELECT r.trace_id, sum(r.prompt_tokens - coalesce(r.cached_tokens, 0)) AS tokens, count(*) AS passes
                    FROM (SELECT *, row_number() OVER (PARTITION BY trace_id ORDER BY start_ns) AS nth
                          FROM {q.passes} WHERE true
                            AND trace_id IN (SELECT trace_id FROM seq)) r
                    WHERE r.nth > 1 GROUP BY r.trace_id),
                 turns AS (SELECT seq.trace_id, seq.start_ns, coalesce(seq.reprefill, later.tokens, 0) AS reprefill,
                                  coalesce(seq.passes, later.passes + 1) AS passes
                           FROM seq LEFT JOIN later USING (trace_id))
            SELECT count(*) AS n, median(reprefill) AS tokens, median(passes) AS passes,
                   (list(trace_id ORDER BY start_ns DESC))[1:5] AS ids FROM turns WHERE reprefill > 0""")
        if not a.get("n"):
            return []
        ids = tuple(a["ids"])
        return [self.finding(
            S.LOOP_FAN_OUT, "info", f"{a['n']} agent turns ran tool calls one after another",
            "Each sequential tool call adds an inference pass that prefills the tokens appended since the last.",
            [Evidence("sequential turns", a["n"], "", ids), Evidence("median tokens prefilled again", a["tokens"], "tokens", ids),
             Evidence("median passes per turn", a["passes"])],
            ids, "Let the model request independent tool calls in parallel (one pass for all results).", 0.2,
        )]
