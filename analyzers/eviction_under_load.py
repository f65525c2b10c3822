"""Silent: eviction under load. When the KV pool fills past its watermark, cached prefixes are evicted
and the next request that needed them pays a full prefill; the hit rate falls with pool pressure while
nothing errors."""

from __future__ import annotations

from llmtrace.analyzers.base import SymptomAnalyzer
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.query import Query


class EvictionUnderLoad(SymptomAnalyzer):
    symptom = "eviction_under_load"

    def find(self, q: Query) -> list[Finding]:
        ev_rel = q.stage_sql("cache.eviction", {
            "evicted": ("llmtrace.eviction.blocks_evicted", "int"), "pressure": ("llmtrace.eviction.pressure", "float"),
            "watermark": ("llmtrace.eviction.watermark", "float"), "policy": ("llmtrace.eviction.policy", "str")})
        groups = q.rows(f"""
            SELECT coalesce(e.pressure >= e.watermark, false) AS pressed, count(*) AS n,
                   avg(coalesce(r.hit_ratio, 0)) AS hit, count(*) FILTER (WHERE e.evicted > 0) AS evicting,
                   sum(coalesce(e.evicted, 0)) AS evicted, mode(e.policy) AS policy,
                   (list(e.trace_id ORDER BY e.start_ns DESC))[1:5] AS ids,
                   (list(e.trace_id ORDER BY e.start_ns DESC) FILTER (WHERE e.evicted > 0))[1:5] AS evict_ids
            FROM {ev_rel} e JOIN {q.requests} r ON r.span_id = e.parent_span_id
            GROUP BY ALL""")
        by = {bool(g["pressed"]): g for g in groups}
        if True not in by or False not in by:
            return []
        high, low = by[True], by[False]
        evicted = int(high["evicted"] or 0) + int(low["evicted"] or 0)  # type: ignore[call-overload]
        total = int(high["n"]) + int(low["n"])  # type: ignore[call-overload]
        if total < 4 or not evicted:
            return []
        hr_high, hr_low = float(high["hit"]), float(low["hit"])  # type: ignore[arg-type]
        if hr_low - hr_high < 0.15:
            return []
        ids = tuple(high["ids"])  # type: ignore[arg-type]
        return [self.finding(
            "cache.eviction", "warning" if hr_low - hr_high < 0.4 else "critical",
            f"Hit rate falls from {hr_low:.0%} to {hr_high:.0%} when the KV pool is past its watermark",
            f"{int(high['evicting'] or 0) + int(low['evicting'] or 0)} passes evicted blocks ({evicted} in all); "  # type: ignore[call-overload]
            "passes admitted under pressure found less of their prefix cached.",
            [Evidence("hit rate under pressure", round(hr_high, 3), "", ids, baseline=round(hr_low, 3)),
             Evidence("passes under pressure", high["n"], f"of {total}", ids),
             Evidence("blocks evicted", evicted, "blocks", tuple(high["evict_ids"] or low["evict_ids"] or ())),  # type: ignore[arg-type]
             Evidence("eviction policy", high["policy"] or low["policy"], "")],
            ids, "Grow the KV pool or host tier (cache.host_offload), lower max_running, or use an eviction policy "
            "that keeps shared prefixes (leaf_first).", 0.5 + (hr_low - hr_high) / 2,
        )]
