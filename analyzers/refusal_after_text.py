"""Text shown, then a refusal: Safety & shaping. A streaming moderator that lags the generator lets the
user read text that is then withdrawn."""

from __future__ import annotations

from llmtrace.analyzers.base import SymptomAnalyzer
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.query import Query


class RefusalAfterText(SymptomAnalyzer):
    symptom = "refusal_after_text"

    def find(self, q: Query) -> list[Finding]:
        rel = q.stage_sql("safety.moderation", {
            "lag": ("llmtrace.moderation.lag_tokens", "int"), "aborted": ("llmtrace.moderation.aborted", "bool"),
            "retracted": ("llmtrace.moderation.retracted_chars", "int")})
        cut = "aborted AND coalesce(retracted, 0) > 0"
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE {cut}) AS cut,
                             median(coalesce(lag, 0)) FILTER (WHERE {cut}) AS lag,
                             median(retracted) FILTER (WHERE {cut}) AS retracted,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE {cut}))[1:5] AS ids
                      FROM {rel}""")
        n, n_cut = int(a.get("n") or 0), int(a.get("cut") or 0)
        if not n_cut:
            return []
        ids = tuple(a["ids"])
        lag = float(a["lag"] or 0)
        return [self.finding(
            "safety.moderation", "warning" if n_cut / n < 0.2 else "critical",
            f"{n_cut} streams showed text and then retracted it",
            f"Moderation ran {lag:.0f} tokens behind the generator, so users saw text before the verdict cut it.",
            [Evidence("streams cut after text was shown", n_cut, f"of {n}", ids),
             Evidence("median moderation lag", lag, "tokens", ids),
             Evidence("median characters retracted", a["retracted"], "chars", ids)],
            ids, "Moderate the prompt before generating, or hold the stream back by the moderator's lag.",
            0.6 + 0.4 * n_cut / n,
        )]
