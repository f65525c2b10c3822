"""Where the first token's time went, as evidence: the ``ttft_breakdown`` view read for a finding's passes
("62% of TTFT was prefill of 3,900 uncached tokens"). Stores without the view (or without server passes of
an engine that splits its time) simply give no such line."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

import duckdb

from llmtrace.analyzers.core.finding import Evidence
from llmtrace.analyzers.core.query import Query, Row
from llmtrace.tracer.storage.store import StoreError
from llmtrace.tracer.storage.time_views import ttft_breakdown_select

MAX_IDS = 200
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def ttft_parts(q: Query, trace_ids: Sequence[str], component: str = "prefill") -> list[Row] | None:
    """The ``component`` rows of the ``ttft_breakdown`` view (ms, share) for the server passes of ``trace_ids``,
    each with its pass's uncached prompt tokens; None when the store cannot say. Read once a run per trace:
    the what-if's prefill rate and the TTFT evidence line ask for overlapping traces, and each read of the
    view's definition scans spans."""
    # trace ids go into the SQL as literals (the source appears more than once in the view's definition);
    # only ids of the W3C shape are taken, so nothing else can reach the statement
    ids = [t for t in dict.fromkeys(trace_ids) if _TRACE_ID.fullmatch(t)]
    known: dict[str, list[Row]] | None = q.memo.setdefault(f"ttft_parts:{component}", {})
    if known is None:  # an earlier read failed: the store has no such view
        return None
    missing = [t for t in ids if t not in known]
    if missing:
        # the view's own definition over just these traces' spans (filtering the view afterwards would make
        # DuckDB split every stage span of the store first: seconds on 100k passes instead of milliseconds)
        breakdown = ttft_breakdown_select(q.trace_spans(missing))
        try:
            rows = q.rows(f"""
                SELECT t.trace_id, t.share, t.ms, p.prompt_tokens - coalesce(p.cached_tokens, 0) AS uncached
                FROM ({breakdown}) t JOIN {q.passes} p ON p.server_span_id = t.pass_span_id
                WHERE t.component = ?""", [component])
        except (duckdb.Error, StoreError):  # an older store without the view, or another engine's refusal
            q.memo[f"ttft_parts:{component}"] = None
            return None
        for t in missing:
            known[t] = []
        for r in rows:
            known.setdefault(str(r["trace_id"]), []).append(r)
    return [r for t in ids for r in known.get(t, ())]


def ttft_share(q: Query, trace_ids: tuple[str, ...] | list[str], component: str = "prefill") -> Evidence | None:
    """The median share of TTFT ``component`` held across the server passes of ``trace_ids``, with the
    median uncached prompt tokens of those passes; None when the store cannot say."""
    ids = [t for t in dict.fromkeys(trace_ids) if _TRACE_ID.fullmatch(t)][:MAX_IDS]
    if not ids:
        return None
    rows = [r for r in ttft_parts(q, ids, component) or () if r["share"] is not None]
    if not rows:
        return None
    share = statistics.median(float(r["share"]) for r in rows)
    ms = statistics.median(float(r["ms"]) for r in rows)
    uncached = statistics.median(float(r["uncached"] or 0) for r in rows)
    what = f"{share:.0%} of TTFT ({ms:,.0f} ms)" + (f", prefill of {uncached:,.0f} uncached tokens"
                                                  if component == "prefill" else "")
    return Evidence(f"time to first token spent in {component} (median of {len(rows)} server passes)", what,
                    "", tuple(ids[:5]))
