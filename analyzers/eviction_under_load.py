"""Silent: eviction under load. When the KV pool fills, cached prefixes are evicted and the next request
that needed them pays a full prefill; nothing errors, the hit rate just sags with pool pressure.

The signature read here: a pass whose prompt starts with blocks an earlier pass in the window already
computed (the prefix-cache block hashes match) yet found fewer of them cached — a *re-miss* — while the
pool was evicting.
"""

from __future__ import annotations

from llmtrace.analyzers.base import SymptomAnalyzer
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.query import Query, attr, median, sample_ids

MAX_PASSES = 5000  # most recent server passes examined


class EvictionUnderLoad(SymptomAnalyzer):
    symptom = "eviction_under_load"

    def find(self, q: Query) -> list[Finding]:
        rows = q.rows(f"""
            WITH tok AS (
                SELECT parent_span_id, {attr('llmtrace.tokenization.block_hashes', 'str[]')} AS chain
                FROM (SELECT parent_span_id, attributes FROM {q.spans} WHERE stage = 'intake.tokenization'
                      ORDER BY start_ns DESC LIMIT {MAX_PASSES})),
            ev AS (
                SELECT parent_span_id, {attr('llmtrace.eviction.blocks_evicted', 'int')} AS evicted,
                       {attr('llmtrace.eviction.pressure', 'float')} AS pressure,
                       {attr('llmtrace.eviction.policy')} AS policy
                FROM {q.spans} WHERE stage = 'cache.eviction' AND parent_span_id IN (SELECT parent_span_id FROM tok)),
            blk AS (
                SELECT parent_span_id, {attr('llmtrace.blocks.block_size', 'int')} AS block_size
                FROM {q.spans} WHERE stage = 'cache.block_allocation'
                  AND parent_span_id IN (SELECT parent_span_id FROM tok))
            SELECT r.trace_id, r.start_ns, coalesce(r.cached_tokens, 0) AS cached, tok.chain,
                   coalesce(ev.evicted, 0) AS evicted, ev.pressure, ev.policy, coalesce(blk.block_size, 16) AS block_size
            FROM tok JOIN {q.requests} r ON r.span_id = tok.parent_span_id
            LEFT JOIN ev ON ev.parent_span_id = tok.parent_span_id LEFT JOIN blk ON blk.parent_span_id = tok.parent_span_id
            ORDER BY r.start_ns""")
        if len(rows) < 3:
            return []
        seen: set[str] = set()
        evicted_so_far = 0
        remiss: list[dict[str, object]] = []
        others: list[dict[str, object]] = []
        lost_tokens = 0
        for r in rows:
            chain = list(r["chain"] or [])  # type: ignore[call-overload]
            resident = 0
            for h in chain:  # chains are cumulative: the k-th hash names the whole prefix up to block k
                if h not in seen:
                    break
                resident += 1
            expected = resident * int(r["block_size"])  # type: ignore[call-overload]
            cached = int(r["cached"])  # type: ignore[call-overload]
            if evicted_so_far > 0 and expected - cached >= int(r["block_size"]):  # type: ignore[call-overload]
                remiss.append(r)
                lost_tokens += expected - cached
            else:
                others.append(r)
            evicted_so_far += int(r["evicted"])  # type: ignore[call-overload]
            seen.update(chain)
        if not remiss or evicted_so_far == 0:
            return []
        ids = sample_ids([r["trace_id"] for r in reversed(remiss)])
        p_re = median([float(r["pressure"]) for r in remiss if r["pressure"] is not None])  # type: ignore[arg-type]
        p_ok = median([float(r["pressure"]) for r in others if r["pressure"] is not None])  # type: ignore[arg-type]
        share = len(remiss) / len(rows)
        policy = next((r["policy"] for r in rows if r["policy"]), None)
        return [self.finding(
            "cache.eviction", "critical" if share >= 0.3 else "warning",
            f"{len(remiss)} passes re-computed prefixes the cache had held and evicted",
            f"Their prompt started with blocks an earlier pass had computed, but {lost_tokens} of those tokens were "
            f"no longer cached: the pool evicted {evicted_so_far} blocks under load and these prefixes were later "
            "needed again.",
            [Evidence("passes that missed an evicted prefix", len(remiss), f"of {len(rows)}", ids),
             Evidence("prompt tokens recomputed", lost_tokens, "tokens", ids),
             Evidence("blocks evicted in the window", evicted_so_far, "blocks"),
             Evidence("pool pressure on those passes", p_re, "0..1", ids, baseline=p_ok),
             Evidence("eviction policy", policy, "")],
            ids, "Grow the KV pool (or add a host tier, cache.host_offload), lower max_running, or use an eviction "
            "policy that keeps shared prefixes (leaf_first); then re-check the hit rate with `llmtrace check`.",
            min(1.0, 0.5 + share),
        )]
