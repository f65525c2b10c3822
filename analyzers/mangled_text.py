"""Emoji or non-Latin text mangled mid-stream: Generation. Replacement characters reached the caller."""

from __future__ import annotations

from llmtrace.analyzers.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.query import Query


class MangledText(SymptomAnalyzer):
    symptom = "mangled_text"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        rel = q.stage_sql("gen.detokenization", {
            "repl": ("llmtrace.detok.replacement_chars", "int"), "held": ("llmtrace.detok.held_back_max", "int"),
            "skip": ("llmtrace.detok.skip_special_tokens", "bool")})
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE repl > 0) AS bad, sum(repl) AS repl,
                             median(coalesce(held, 0)) FILTER (WHERE repl > 0) AS held,
                             any_value(skip) FILTER (WHERE repl > 0) AS skip,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE repl > 0))[1:5] AS ids
                      FROM {rel}""")
        n, bad = int(a.get("n") or 0), int(a.get("bad") or 0)
        if not bad:
            return []
        share = bad / n
        ids = tuple(a["ids"])
        held = float(a["held"] or 0)
        return [self.finding(
            "gen.detokenization", severity_for(share, 0.05, 0.3),
            f"{bad} outputs carried replacement characters (U+FFFD)",
            "Bytes of a multi-byte character were decoded before the rest arrived, so the stream showed '\ufffd' "
            f"instead of the character (most bytes held back: {held:.0f}).",
            [Evidence("outputs with U+FFFD", bad, f"of {n}", ids),
             Evidence("replacement characters", a["repl"], "chars", ids),
             Evidence("most bytes held back", held, "bytes", ids, baseline=4),
             Evidence("skip_special_tokens", a["skip"], "", ids)],
            ids, "Decode incrementally with byte hold-back (keep incomplete UTF-8 sequences until complete).",
            0.5 + 0.5 * share,
        )]
