"""Silent: eviction under load. When the KV pool fills, cached prefixes are evicted and the next request
that needed them pays a full prefill; nothing errors, the hit rate just sags with pool pressure.

The signature read here: a pass whose prompt starts with a block an earlier pass on the same replica
already computed (the first prefix-cache block hash matches) yet found not even that block cached — a
*re-miss* — after the pool had evicted blocks.
"""

from __future__ import annotations

from llmtrace.analyzers.cache import kv_replay
from llmtrace.analyzers.cache.what_if import GROW_POOL, curve_evidence, grow_hint
from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class EvictionUnderLoad(SymptomAnalyzer):
    symptom = "eviction_under_load"

    def find(self, q: Query) -> list[Finding]:
        tok = q.stage_sql(S.INTAKE_TOKENIZATION, {"first_block": N.TOKENIZATION_BLOCK_HASHES})
        ev = q.stage_sql(S.CACHE_EVICTION, {"evicted": N.EVICTION_BLOCKS_EVICTED, "pressure": N.EVICTION_PRESSURE,
                                            "policy": N.EVICTION_POLICY})
        blk = q.stage_sql(S.CACHE_BLOCK_ALLOCATION, {"block_size": N.BLOCKS_BLOCK_SIZE})
        a = q.one(f"""
            WITH p AS (
                SELECT r.trace_id, r.start_ns, r.replica, coalesce(r.cached_tokens, 0) AS cached,
                       coalesce(r.prompt_tokens, 0) AS prompt_tokens, tok.first_block[1] AS first_block,
                       coalesce(ev.evicted, 0) AS evicted, ev.pressure, ev.policy,
                       coalesce(blk.block_size, 16) AS block_size
                FROM {tok} tok JOIN {q.passes} r ON r.server_span_id = tok.parent_span_id
                LEFT JOIN {ev} ev ON ev.parent_span_id = tok.parent_span_id
                LEFT JOIN {blk} blk ON blk.parent_span_id = tok.parent_span_id
                WHERE tok.first_block[1] IS NOT NULL),
            -- a pass re-misses when an earlier pass on its replica began with the same block, and the pool had
            -- evicted blocks before it: the first such pass and the first eviction of each replica, as group
            -- aggregates joined back (two ordered window scans over every pass cost more than the rest)
            fb AS (SELECT coalesce(replica, '') AS rk, first_block, min(start_ns) AS first_ns FROM p
                   GROUP BY rk, first_block),
            fe AS (SELECT coalesce(replica, '') AS rk, min(start_ns) AS evict_ns FROM p WHERE evicted > 0 GROUP BY rk),
            m AS (SELECT p.*, p.start_ns > fb.first_ns AND coalesce(p.start_ns > fe.evict_ns, false)
                             AND cached < block_size AS remiss
                  FROM p JOIN fb ON fb.rk = coalesce(p.replica, '') AND fb.first_block = p.first_block
                  LEFT JOIN fe ON fe.rk = coalesce(p.replica, ''))
            SELECT count(*) AS n, count(*) FILTER (WHERE remiss) AS remiss, sum(evicted) AS evicted,
                   sum(prompt_tokens) FILTER (WHERE remiss) AS recomputed,
                   median(pressure) FILTER (WHERE remiss) AS p_remiss, median(pressure) FILTER (WHERE NOT remiss) AS p_ok,
                   mode(policy) AS policy, (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE remiss))[1:5] AS ids
            FROM m""")
        n, remiss, evicted = (int(a.get(k) or 0) for k in ("n", "remiss", "evicted"))
        if n < 3 or not remiss or not evicted:
            return []
        ids = tuple(a["ids"])
        share = remiss / n
        # the same traffic replayed through pools of other sizes: how much of the loss memory would buy back
        curve = kv_replay.curve_of(q)
        return [self.finding(
            S.CACHE_EVICTION, "critical" if share >= 0.3 else "warning",
            f"{remiss} passes re-computed prefixes the cache had held and evicted",
            f"Their prompt started with a block an earlier pass on the same replica had computed, but not even "
            f"that block was still cached: the pool evicted {evicted} blocks under load and these prefixes were "
            "needed again.",
            [Evidence("passes that missed an evicted prefix", remiss, f"of {n}", ids),
             Evidence("prompt tokens prefilled again", a["recomputed"], "tokens", ids),
             Evidence("blocks evicted in the window", evicted, "blocks"),
             Evidence("pool pressure on those passes", a["p_remiss"], "0..1", ids, baseline=a["p_ok"]),
             Evidence("eviction policy", a["policy"], ""), *curve_evidence(curve)],
            ids, GROW_POOL.format(hint=grow_hint(curve)),
            min(1.0, 0.5 + share), cause="engine:evicted", stages=(S.CACHE_PREFIX_MATCH, S.CACHE_EVICTION),
            affected_share=share,
        )]
