"""Right fact, wrong source: Intake. Retrieved chunks without ids or clear delimiters let a model quote
one source's fact under another's name; duplicates make two sources look like one.

Reference text the app wrote once (company facts under "Use the information below" in the system prompt)
reads like passages but is one source, the same in every request: when every prompt with a bad shape (at
least ``MIN_SAME``) carries the same passage set in its system prompt, it is no finding. Retrieved passages
change with the question; a block in a user message is judged even when identical, and so are stores
written before the set's hash and placement were recorded."""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

# Fewer prompts than this cannot show that a block never changes.
MIN_SAME = 3


class WrongSource(SymptomAnalyzer):
    symptom = "wrong_source"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        rel = q.stage_sql(S.INTAKE_EVIDENCE_FORMATTING, {
            "chunks_out": N.EVIDENCE_CHUNKS_OUT, "ids": N.EVIDENCE_ID_SCHEME, "delim": N.EVIDENCE_DELIMITER,
            "dups": N.EVIDENCE_DUPLICATES_SENT, "passages": N.EVIDENCE_PASSAGES_HASH, "placed": N.EVIDENCE_PLACEMENT})
        unl, und = "coalesce(ids, 'none') = 'none'", "coalesce(delim, 'none') = 'none'"
        # A passage sent twice (under two labels, or none) makes one source look like two corroborating ones.
        dup = "coalesce(dups, 0) > 0"
        bad_sql = f"{unl} OR {und} OR {dup}"
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE {bad_sql}) AS bad,
                             count(*) FILTER (WHERE {unl}) AS unlabelled, count(*) FILTER (WHERE {und}) AS undelimited,
                             count(*) FILTER (WHERE {dup}) AS duplicated,
                             median(chunks_out) FILTER (WHERE {bad_sql}) AS chunks,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE {bad_sql}))[1:5] AS ids,
                             count(DISTINCT passages) FILTER (WHERE {bad_sql}) AS sets,
                             count(*) FILTER (WHERE ({bad_sql}) AND passages IS NOT NULL
                                              AND placed = 'system') AS fixed_in_system
                      FROM {rel} WHERE chunks_out > 1""")
        n, bad = int(a.get("n") or 0), int(a.get("bad") or 0)
        if not bad:
            return []
        if bad >= MIN_SAME and a["sets"] == 1 and a["fixed_in_system"] == bad:
            return []  # one block, never changing, in the system prompt: the app's own reference text
        share = bad / n
        ids = tuple(a["ids"])
        only_dups = not a["unlabelled"] and not a["undelimited"]
        return [self.finding(
            S.INTAKE_EVIDENCE_FORMATTING, "critical" if share >= 0.5 and not only_dups else "warning",
            f"{bad} prompts sent the same retrieved passage more than once" if only_dups else
            f"{bad} prompts mixed several retrieved chunks without labels"
            + ("" if a["undelimited"] == 0 and a["unlabelled"] else " or delimiters"),
            "The same passage under two labels reads as two sources agreeing." if only_dups else
            ("Each chunk has its own tags, but no id or source: the model cannot say which source a sentence "
             "came from, nor cite it." if a["undelimited"] == 0 and a["unlabelled"] else
             "With no chunk ids or boundaries the model cannot tell which source a sentence came from."),
            [Evidence("prompts with unlabelled chunks", a["unlabelled"], f"of {n}", ids),
             Evidence("prompts with undelimited chunks", a["undelimited"], f"of {n}", ids),
             Evidence("prompts with a passage sent twice", a["duplicated"], f"of {n}", ids),
             Evidence("median chunks per prompt", a["chunks"], "", ids)],
            ids, "Give each chunk a source id and wrap it in delimiters (e.g. <doc id=...>), drop duplicate chunks "
            "(format_evidence dedupes), and ask for citations by id.",
            0.5 + 0.5 * share,
        )]
