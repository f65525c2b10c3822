"""Slow first token, fast stream: Arrival → Cache → Forward.

The usual cause is a prefix cache that never hits because something near the top of the prompt changes
every call (a timestamp in the system prompt). Other explanations checked: a queue in front of the
engine, fresh connections, long uncached prefills, and sequential tool calls that re-prefill.
"""

from __future__ import annotations

from llmtrace.analyzers.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.prefix_divergence import Divergence, find_divergences
from llmtrace.analyzers.query import Query, pass_side, side_filter

MIN_PROMPT_TOKENS = 32  # shorter prompts fit in a block or two: a miss costs nothing worth naming
MISS_RATIO = 0.1  # cached share under which a pass counts as a miss
MISS_SHARE = 0.5  # share of passes missing before it is a finding (the first pass of a template always misses)


class SlowFirstToken(SymptomAnalyzer):
    symptom = "slow_first_token"

    def find(self, q: Query) -> list[Finding]:
        side = pass_side(q, "ttft_ms")
        if side is None:
            return []
        src = f"(SELECT * FROM {q.requests} WHERE {side_filter(side)} AND ttft_ms IS NOT NULL)"
        n = q.one(f"SELECT count(*) AS n FROM {src}")["n"]
        if int(n) < 3:  # type: ignore[call-overload]
            return []
        out: list[Finding] = []
        out += self._cache(q, src)
        out += self._queue(q, src)
        out += self._connection(q)
        out += self._fan_out(q)
        return out

    # ── cache.prefix_match and intake.system_prompt ────────────────────────────────────────
    def _cache(self, q: Query, src: str) -> list[Finding]:
        ratio = "coalesce(cached_tokens, 0) / prompt_tokens"
        # Per deploy: a prompt change ships with a deploy, and one bad deploy hides in a healthy history.
        groups = q.rows(f"""
            SELECT deploy, count(*) AS long,
                   count(*) FILTER (WHERE {ratio} < {MISS_RATIO}) AS misses,
                   median(ttft_ms) FILTER (WHERE {ratio} < {MISS_RATIO}) AS ttft_miss,
                   median(coalesce(cached_tokens, 0)) FILTER (WHERE {ratio} < {MISS_RATIO}) AS cached_miss,
                   median(prompt_tokens) FILTER (WHERE {ratio} < {MISS_RATIO}) AS prompt_miss,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE {ratio} < {MISS_RATIO}))[1:5] AS miss_ids
            FROM {src} WHERE prompt_tokens >= {MIN_PROMPT_TOKENS} GROUP BY deploy""")
        hit = q.one(f"""SELECT median(ttft_ms) AS ttft_hit, median(coalesce(cached_tokens, 0)) AS cached_hit
                        FROM {src} WHERE prompt_tokens >= {MIN_PROMPT_TOKENS} AND {ratio} >= 0.5""")
        bad = [g for g in groups if int(g["long"]) >= 3 and int(g["misses"]) / int(g["long"]) >= MISS_SHARE]  # type: ignore[call-overload]
        if not bad:
            return []
        a = max(bad, key=lambda g: (int(g["misses"]) / int(g["long"]), int(g["misses"])))  # type: ignore[call-overload]
        a.update(hit)
        long, n_miss = int(a["long"]), int(a["misses"])  # type: ignore[call-overload]
        share = n_miss / long
        ttft_miss = a["ttft_miss"]
        ttft_hit = a["ttft_hit"]
        cost = (float(ttft_miss) - float(ttft_hit)) if ttft_miss is not None and ttft_hit is not None else None  # type: ignore[arg-type]
        deploy_note = f" under deploy {a['deploy']}" if len(groups) > 1 and a["deploy"] is not None else ""
        volatile = self._volatile(q)
        dep = "deploy IS NULL" if a["deploy"] is None else "deploy = ?"
        missed = [str(r["trace_id"]) for r in q.rows(
            f"""SELECT trace_id FROM {src} WHERE prompt_tokens >= {MIN_PROMPT_TOKENS} AND {ratio} < {MISS_RATIO}
                AND {dep} ORDER BY start_ns DESC LIMIT 2000""", None if a["deploy"] is None else [a["deploy"]])]
        divergences = [d for d in find_divergences(q, missed) if d.share >= 0.5]
        client_div = next((d for d in divergences if d.char_offset >= 0), None)
        server_div = next((d for d in divergences if d.token_offset >= 0), None)
        miss_ids = tuple(a["miss_ids"] or ())  # type: ignore[arg-type]
        ev = [
            Evidence("passes with no cached prefix", n_miss, f"of {long}", miss_ids),
            Evidence("median cached tokens on a miss", a["cached_miss"], "tokens", baseline=a["cached_hit"]),
            Evidence("median prompt tokens", a["prompt_miss"], "tokens"),
            Evidence("median TTFT on a miss", ttft_miss, "ms", miss_ids, baseline=ttft_hit),
        ]
        if cost is not None:
            ev.append(Evidence("TTFT a miss costs over a hit", round(cost, 2), "ms"))
        where = ""
        if server_div is not None:
            ev.append(Evidence("consecutive prompts part at", server_div.token_offset, "tokens",
                               server_div.trace_ids))
        if client_div is not None:
            where = client_div.describe()
            ev.append(Evidence("prompts part in", where, "", client_div.trace_ids))
        if volatile is not None:
            offset, kind, n, ids = volatile
            ev.append(Evidence("volatile field in the system prompt", f"{kind} at char {offset}", "", ids))
            where = where or f"the system prompt at char {offset} ({kind})"
        because = f" — the prompts part at {where}" if where else ""
        cost_share = (cost / float(ttft_miss)) if cost is not None and ttft_miss else 0.5  # type: ignore[arg-type]
        score = 0.5 * share + 0.5 * max(0.0, min(1.0, cost_share))
        out = [self.finding(
            "cache.prefix_match", severity_for(share, 0.3, 0.6),
            f"{share:.0%} of prompts miss the prefix cache{deploy_note}{because}",
            f"{n_miss} of {long} passes{deploy_note} of {MIN_PROMPT_TOKENS}+ tokens reused (almost) nothing from the "
            f"prefix cache, so their whole prompt was prefilled before the first token"
            + (f"; a miss costs {cost:.1f} ms of TTFT over a hit" if cost is not None else "") + ".",
            ev, miss_ids,
            "Open intake.system_prompt and move anything that changes per call (time, ids, counters) below "
            "the stable part of the prompt; then check cache.prefix_match hit tokens rise.",
            score,
        )]
        if volatile is not None or (client_div is not None and client_div.segment == "system"):
            out.append(self._system_prompt_finding(volatile, client_div, share, miss_ids, score))
        return out

    def _volatile(self, q: Query) -> tuple[int, str, int, tuple[str, ...]] | None:
        rel = q.stage_sql("intake.system_prompt", {
            "off": ("llmtrace.system.volatile_offset", "int"), "kind": ("llmtrace.system.volatile_kind", "str"),
            "field": ("llmtrace.system.volatile_field", "str"), "text": ("llmtrace.system.volatile_text", "str")})
        row = q.one(f"""SELECT off, kind, count(*) AS n, (list(trace_id ORDER BY start_ns DESC))[1:5] AS ids,
                               any_value(field) AS field, any_value(text) AS text
                        FROM {rel} WHERE off >= 0 GROUP BY off, kind ORDER BY n DESC LIMIT 1""")
        if not row:
            return None
        kind = str(row["kind"]) + (f" in field {{{row['field']}}}" if row["field"] else "")
        if row["text"]:
            kind += f" ({str(row['text'])[:32]!r}…)"
        return int(row["off"]), kind, int(row["n"]), tuple(row["ids"])  # type: ignore[call-overload,arg-type]

    def _system_prompt_finding(self, volatile: tuple[int, str, int, tuple[str, ...]] | None,
                               div: Divergence | None, miss_share: float, miss_ids: tuple[str, ...],
                               score: float) -> Finding:
        ev: list[Evidence] = []
        if volatile is not None:
            offset, kind, n, ids = volatile
            ev += [Evidence("first volatile field", kind, "", ids), Evidence("its offset", offset, "chars", ids),
                   Evidence("system prompts with a volatile field", n)]
            title = f"The system prompt changes every call: a {kind} at char {offset}"
        else:
            title = f"The system prompt changes every call near char {div.char_offset if div else '?'}"
        if div is not None:
            ev.append(Evidence("where consecutive prompts part", div.describe(), "", div.trace_ids))
            if div.text is not None:
                ev.append(Evidence("text at that offset", repr(div.text), "", div.trace_ids, baseline=repr(div.other_text)))
        return self.finding(
            "intake.system_prompt", severity_for(miss_share, 0.3, 0.6), title,
            "Everything after the first changing character is a new prefix to the cache, so each call pays "
            "a full prefill.",
            ev, miss_ids,
            "Put the volatile field after the stable instructions and tools (or drop it); re-run and compare "
            "cache hit rate with `llmtrace check`.",
            score * 0.95,
        )

    # ── arrival.admission ──────────────────────────────────────────────────────────────────
    def _queue(self, q: Query, src: str) -> list[Finding]:
        a = q.one(f"""
            SELECT count(*) AS n, count(*) FILTER (WHERE queue_wait_ms > 0) AS waited,
                   sum(least(1.0, coalesce(queue_wait_ms, 0) / nullif(ttft_ms, 0))) / count(*) AS share,
                   median(queue_wait_ms) FILTER (WHERE queue_wait_ms > 0) AS wait,
                   (list(trace_id ORDER BY queue_wait_ms DESC) FILTER (WHERE queue_wait_ms > 0))[1:5] AS ids
            FROM {src}""")
        waited = int(a["waited"] or 0)  # type: ignore[call-overload]
        share = float(a["share"] or 0)  # type: ignore[arg-type]
        wait = float(a["wait"] or 0)  # type: ignore[arg-type]
        if not waited or share < 0.2 or wait < 10:
            return []
        ids = tuple(a["ids"] or ())  # type: ignore[arg-type]
        return [self.finding(
            "arrival.admission", severity_for(share, 0.3, 0.5), f"{share:.0%} of time to first token is queueing",
            f"{waited} of {a['n']} passes waited for a running slot (median {wait:.0f} ms) before "
            "any prompt token was read.",
            [Evidence("passes that queued", waited, f"of {a['n']}", ids),
             Evidence("median queue wait", wait, "ms", ids),
             Evidence("share of TTFT spent queueing", round(share, 3))],
            ids, "Open arrival.admission: compare queue_depth and max_running; raise the running limit or add "
            "a replica.", share,
        )]

    # ── arrival.connection ─────────────────────────────────────────────────────────────────
    def _connection(self, q: Query) -> list[Finding]:
        rel = q.stage_sql("arrival.connection", {"reused": ("llmtrace.connection.reused", "bool"),
                                                 "ms": ("llmtrace.connection.connect_ms", "float")})
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE reused = false) AS fresh,
                             median(ms) FILTER (WHERE reused = false) AS ms,
                             (list(trace_id) FILTER (WHERE reused = false))[1:5] AS ids FROM {rel}""")
        n, fresh = int(a["n"] or 0), int(a["fresh"] or 0)  # type: ignore[call-overload]
        ms = float(a["ms"] or 0)  # type: ignore[arg-type]
        if n < 3 or fresh / n < 0.5 or ms < 20:
            return []
        share = fresh / n
        ids = tuple(a["ids"] or ())  # type: ignore[arg-type]
        return [self.finding(
            "arrival.connection", "warning", f"{share:.0%} of calls open a new connection ({ms:.0f} ms each)",
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
        fo = q.stage_sql("loop.fan_out", {"mode": ("llmtrace.fanout.mode", "str"), "calls": ("llmtrace.fanout.calls", "int"),
                                          "passes": ("llmtrace.fanout.passes", "int"),
                                          "reprefill": ("llmtrace.fanout.reprefill_tokens", "int")})
        a = q.one(f"""
            WITH seq AS (SELECT * FROM {fo} WHERE mode = 'sequential' AND calls > 1),
                 later AS (
                    SELECT r.trace_id, sum(r.prompt_tokens - coalesce(r.cached_tokens, 0)) AS tokens, count(*) AS passes
                    FROM (SELECT *, row_number() OVER (PARTITION BY trace_id ORDER BY start_ns) AS nth
                          FROM {q.requests} WHERE side IS DISTINCT FROM 'server'
                            AND trace_id IN (SELECT trace_id FROM seq)) r
                    WHERE r.nth > 1 GROUP BY r.trace_id),
                 turns AS (SELECT seq.trace_id, coalesce(seq.reprefill, later.tokens, 0) AS reprefill,
                                  coalesce(seq.passes, later.passes + 1) AS passes
                           FROM seq LEFT JOIN later USING (trace_id))
            SELECT count(*) AS n, median(reprefill) AS tokens, median(passes) AS passes,
                   (list(trace_id))[1:5] AS ids FROM turns WHERE reprefill > 0""")
        if not a.get("n"):
            return []
        ids = tuple(a["ids"])  # type: ignore[arg-type]
        return [self.finding(
            "loop.fan_out", "info", f"{a['n']} agent turns ran tool calls one after another",
            "Each sequential tool call adds an inference pass that prefills the tokens appended since the last.",
            [Evidence("sequential turns", a["n"], "", ids), Evidence("median tokens prefilled again", a["tokens"], "tokens", ids),
             Evidence("median passes per turn", a["passes"])],
            ids, "Let the model request independent tool calls in parallel (one pass for all results).", 0.2,
        )]
