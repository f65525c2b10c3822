"""A router that sends requests away from the replica holding their prefix, as the router itself reported it.

Routers that score replicas by prefix overlap (llm-d's precise-prefix-cache scorer, Dynamo's KV router) know,
for each request, how many of its prompt blocks the chosen replica holds and how many the best-placed one
held; ``llmtrace collect`` maps their spans onto ``arrival.replica_selection`` with both
(tracer/collect/otlp_engines.py). A request routed to a replica with fewer of its blocks than another had
recomputes the difference in prefill: the same cause as cache_loss's ``engine:replica`` (found there from the
prompts themselves), read here without a word of prompt text.

llm-d names the best match and the chosen endpoint but not the chosen endpoint's own match; there the
chosen replica's hit is what its engine reused: the trace's cached tokens over the router's block size.
"""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

MIN_ROUTED_AWAY = 2  # requests routed away before it is a pattern
MIN_SHARE = 0.1  # ... and this share of the requests the router scored


def routed_away(a: SymptomAnalyzer, q: Query) -> list[Finding]:
    rel = q.stage_sql(S.ARRIVAL_REPLICA_SELECTION, {
        "chosen": N.REPLICA_ID, "best": N.REPLICA_BEST_ID, "policy": N.REPLICA_POLICY,
        "hit": N.REPLICA_EXPECTED_HIT_BLOCKS, "top": N.REPLICA_BEST_HIT_BLOCKS, "lost": N.REPLICA_BLOCKS_LOST,
        "total": N.REPLICA_TOTAL_BLOCKS, "bt": N.REPLICA_BLOCK_TOKENS})
    # blocks lost as the router said, else the best match less what the chosen replica's engine reused
    reused = f"(SELECT trace_id, max(cached_tokens) AS cached FROM {q.passes} GROUP BY trace_id)"
    rel = f"""(SELECT r.trace_id, r.start_ns, r.chosen, r.best, r.policy, r.top, r.total,
                      coalesce(r.lost, CASE WHEN r.hit IS NOT NULL THEN greatest(r.top - r.hit, 0)
                                            WHEN r.bt > 0 AND p.cached IS NOT NULL
                                            THEN greatest(r.top - p.cached // r.bt, 0) END) AS lost
               FROM {rel} r LEFT JOIN {reused} p ON p.trace_id = r.trace_id)"""
    s = q.one(f"""
        SELECT count(*) FILTER (WHERE top IS NOT NULL OR lost IS NOT NULL) AS n,
               count(*) FILTER (WHERE lost > 0) AS away,
               sum(lost) FILTER (WHERE lost > 0) AS lost, median(lost) FILTER (WHERE lost > 0) AS median_lost,
               sum(lost) FILTER (WHERE lost > 0 AND total > 0) / nullif(sum(total) FILTER (WHERE lost > 0
                   AND total > 0), 0) AS lost_share,
               mode(policy) AS policy, mode(best) FILTER (WHERE lost > 0) AS holder,
               (list(trace_id ORDER BY lost DESC, start_ns DESC) FILTER (WHERE lost > 0))[1:5] AS ids
        FROM {rel}""")
    n, away = int(s.get("n") or 0), int(s.get("away") or 0)
    if away < MIN_ROUTED_AWAY or away / max(n, 1) < MIN_SHARE:
        return []
    share = away / n
    ids = tuple(s["ids"] or ())
    ev = [Evidence("requests routed away from the replica holding most of their prefix", away, f"of {n}", ids),
          Evidence("prefix blocks resident elsewhere, computed again", int(s["lost"] or 0), "blocks", ids),
          Evidence("median blocks lost a request", s["median_lost"], "blocks", ids)]
    if s.get("lost_share") is not None:
        ev.append(Evidence("share of those prompts' blocks lost", round(float(s["lost_share"]), 3)))
    if s.get("holder"):
        ev.append(Evidence("replica that most often held the prefix", s["holder"], "", ids))
    policy = s.get("policy") or "the router's"
    return [a.finding(
        S.ARRIVAL_REPLICA_SELECTION, severity_for(share, 0.2, 0.5),
        f"The router sent {away} of {n} requests away from the replica that held their prefix",
        f"Routing ({policy}) chose a replica holding fewer of the prompt's cached blocks than another did, so "
        f"those blocks were prefilled again ({int(s['lost'] or 0)} blocks over {away} requests). The router's own "
        "scores say so; no prompt text was needed.",
        ev, ids, "Open arrival.replica_selection: compare expected_hit_blocks with best_hit_blocks; weigh the "
        "prefix scorer above load, or pin a session to one replica.",
        min(1.0, 0.45 + share), cause="engine:replica",
        stages=(S.ARRIVAL_REPLICA_SELECTION, S.CACHE_PREFIX_MATCH), affected_share=share)]
