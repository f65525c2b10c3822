"""Emoji or non-Latin text mangled mid-stream: Generation. Replacement characters reached the caller.

The blame is the decoder's only where it may have split a character: its hold-back was off, or nothing on
record says it was on (other backends, older stores). With the hold-back on (``llmtrace.detok.hold_back``)
a U+FFFD is bytes the model itself produced that never formed a character (a sampled byte token out of
place), or a character the length cap cut after its first bytes; a real model sampling at temperature 1
does that now and then, and it is reported as ``info``, not as a broken decoder.
"""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class MangledText(SymptomAnalyzer):
    symptom = "mangled_text"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        rel = q.stage_sql(S.GEN_DETOKENIZATION, {
            "repl": N.DETOK_REPLACEMENT_CHARS, "held": N.DETOK_HELD_BACK_MAX,
            "skip": N.DETOK_SKIP_SPECIAL_TOKENS, "hold": N.DETOK_HOLD_BACK})
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE repl > 0 AND NOT w) AS bad,
                             sum(repl) FILTER (WHERE NOT w) AS repl,
                             median(coalesce(held, 0)) FILTER (WHERE repl > 0 AND NOT w) AS held,
                             any_value(skip) FILTER (WHERE repl > 0 AND NOT w) AS skip,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE repl > 0 AND NOT w))[1:5] AS ids,
                             count(*) FILTER (WHERE repl > 0 AND w) AS model_made,
                             sum(repl) FILTER (WHERE w) AS model_repl,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE repl > 0 AND w))[1:5] AS model_ids
                      FROM (SELECT *, coalesce(hold, false) AS w FROM {rel})""")
        n, bad = int(a.get("n") or 0), int(a.get("bad") or 0)
        out: list[Finding] = []
        if bad:
            share = bad / n
            ids = tuple(a["ids"])
            held = float(a["held"] or 0)
            out.append(self.finding(
                S.GEN_DETOKENIZATION, severity_for(share, 0.05, 0.3),
                f"{bad} outputs carried replacement characters (U+FFFD)",
                "Bytes of a multi-byte character were decoded before the rest arrived, so the stream showed '\ufffd' "
                f"instead of the character (most bytes held back: {held:.0f}).",
                [Evidence("outputs with U+FFFD", bad, f"of {n}", ids),
                 Evidence("replacement characters", a["repl"], "chars", ids),
                 Evidence("most bytes held back", held, "bytes", ids, baseline=4),
                 Evidence("skip_special_tokens", a["skip"], "", ids)],
                ids, "Decode incrementally with byte hold-back (keep incomplete UTF-8 sequences until complete).",
                0.5 + 0.5 * share,
            ))
        made = int(a.get("model_made") or 0)
        if made:
            ids = tuple(a["model_ids"])
            out.append(self.finding(
                S.GEN_DETOKENIZATION, "info",
                f"{made} outputs carried U+FFFD the model produced (the decoder held back partial characters)",
                "The hold-back was on, so no character was split by the decoder: these are bytes the model sampled "
                "that never formed a character, or a character the length cap cut after its first bytes.",
                [Evidence("outputs with U+FFFD, hold-back on", made, f"of {n}", ids),
                 Evidence("replacement characters", a["model_repl"], "chars", ids)],
                ids, "Look at the sampling settings (a high temperature samples stray byte tokens) and at answers "
                "cut by max_tokens; the decoder is not the cause.", 0.1 * made / max(1, n),
            ))
        return out
