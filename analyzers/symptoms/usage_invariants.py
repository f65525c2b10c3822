"""Usage invariants: token totals that cannot be true, and local counts that disagree with the provider's.

OpenAI counts cached tokens inside the input tokens, Anthropic adds them on top; the adapters normalise
to "inside". After that, cached > input, negative counts, or output past max_tokens mean the accounting
(and so the bill the meters compute) is wrong. A server pass under a client pass lets us compare the
tokens counted where the prompt was tokenized with the ones the client was told about.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.analyzers.core.query import Query, attr, sample_ids
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


@dataclass(frozen=True, slots=True)
class UsageProblem:
    kind: str  # cached_over_input, negative, output_over_cap, provider_flagged, local_mismatch
    count: int
    detail: str
    trace_ids: tuple[str, ...]


def usage_problems(q: Query) -> list[UsageProblem]:
    out: list[UsageProblem] = []
    row = q.one(f"""
        SELECT count(*) FILTER (WHERE cached_tokens > prompt_tokens) AS cached_over,
               list(trace_id ORDER BY start_ns DESC) FILTER (WHERE cached_tokens > prompt_tokens) AS cached_ids,
               count(*) FILTER (WHERE prompt_tokens < 0 OR cached_tokens < 0 OR output_tokens < 0) AS negative,
               list(trace_id ORDER BY start_ns DESC) FILTER (WHERE prompt_tokens < 0 OR cached_tokens < 0 OR output_tokens < 0)
                   AS negative_ids,
               count(*) FILTER (WHERE max_tokens > 0 AND output_tokens > max_tokens) AS over_cap,
               list(trace_id ORDER BY start_ns DESC) FILTER (WHERE max_tokens > 0 AND output_tokens > max_tokens) AS over_ids
        FROM {q.passes}""")
    if row.get("cached_over"):
        out.append(UsageProblem("cached_over_input", int(row["cached_over"]),
                                "cached tokens exceed input tokens (cache counted on top of input, not inside it)",
                                sample_ids(row["cached_ids"] or [])))
    if row.get("negative"):
        out.append(UsageProblem("negative", int(row["negative"]), "negative token counts",
                                sample_ids(row["negative_ids"] or [])))
    if row.get("over_cap"):
        out.append(UsageProblem("output_over_cap", int(row["over_cap"]), "more output tokens than max_tokens allows",
                                sample_ids(row["over_ids"] or [])))
    flagged = q.rows(f"""SELECT trace_id FROM {q.spans} WHERE stage = '{S.METERS_CACHE_ACCOUNTING}'
                         AND {attr(N.METERS_USAGE_CONSISTENT)} = false
                         ORDER BY start_ns DESC""")
    if flagged:
        out.append(UsageProblem("provider_flagged", len(flagged), "the meters marked the provider's usage impossible",
                                sample_ids([r["trace_id"] for r in flagged])))
    mism = q.rows(f"""
        SELECT trace_id, client_prompt_tokens AS reported, prompt_tokens AS counted FROM {q.passes}
        WHERE observed_by = 'both' AND prompt_tokens <> client_prompt_tokens ORDER BY start_ns DESC""")
    if mism:
        ex = mism[0]
        out.append(UsageProblem("local_mismatch", len(mism),
                                f"tokens counted by the server differ from those the client reports "
                                f"(e.g. {ex['counted']} vs {ex['reported']})",
                                sample_ids([r["trace_id"] for r in mism])))
    return out
