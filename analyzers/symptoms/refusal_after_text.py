"""Text shown, then a refusal: Safety & shaping. A streaming moderator that lags the generator lets the
user read text that is then withdrawn."""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import SKEW_NS, Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

# cut passes whose stream set-up is read to tell a stream from a buffered answer (the newest of them)
STREAM_SAMPLE = 200


class RefusalAfterText(SymptomAnalyzer):
    symptom = "refusal_after_text"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        rel = q.stage_sql(S.SAFETY_MODERATION, {
            "lag": N.MODERATION_LAG_TOKENS, "aborted": N.MODERATION_ABORTED, "retracted": N.MODERATION_RETRACTED_CHARS})
        cut = "aborted AND coalesce(retracted, 0) > 0"
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE {cut}) AS cut,
                             median(coalesce(lag, 0)) FILTER (WHERE {cut}) AS lag,
                             median(retracted) FILTER (WHERE {cut}) AS retracted,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE {cut}))[1:5] AS ids,
                             (list(parent_span_id ORDER BY start_ns DESC, parent_span_id)
                                 FILTER (WHERE {cut}))[1:{STREAM_SAMPLE}] AS recent,
                             (list(start_ns ORDER BY start_ns DESC) FILTER (WHERE {cut}))[1:{STREAM_SAMPLE}] AS recent_ns
                      FROM {rel}""")
        n, n_cut = int(a.get("n") or 0), int(a.get("cut") or 0)
        if not n_cut:
            return self._filtered_after_text(q)
        ids = tuple(a["ids"])
        lag = float(a["lag"] or 0)
        # a stream showed the text before the verdict; a buffered answer was generated, then thrown away
        if self._streamed(q, list(a["recent"]), min(a["recent_ns"])) * 2 >= len(a["recent"]):
            title = f"{n_cut} streams showed text and then retracted it"
            why = "users saw text before the verdict cut it"
        else:
            title = f"{n_cut} answers were generated and then withheld by a lagging moderator"
            why = "whole answers were written before the verdict threw them away (a stream would have shown them)"
        return [self.finding(
            S.SAFETY_MODERATION, "warning" if n_cut / n < 0.2 else "critical", title,
            f"Moderation ran {lag:.0f} tokens behind the generator, so {why}.",
            [Evidence("answers cut after text was generated", n_cut, f"of {n}", ids),
             Evidence("median moderation lag", lag, "tokens", ids),
             Evidence("median characters retracted", a["retracted"], "chars", ids)],
            ids, "Moderate the prompt before generating, or hold the stream back by the moderator's lag.",
            0.6 + 0.4 * n_cut / n,
        )]

    @staticmethod
    def _streamed(q: Query, passes: list[str], since: int) -> int:
        """How many of ``passes`` (their moderation spans' parents: the newest cut ones) streamed, by the stream
        set-up span beside each. Only the newest are looked up: the time bound lets the scan skip the older row
        groups, where reading every pass's set-up would parse each one's JSON for a share a sample gives."""
        setup = q.stage_sql(S.ARRIVAL_STREAM_SETUP, {"streamed": N.STREAM_REQUESTED},
                            f"AND start_ns >= {int(since) - SKEW_NS} AND parent_span_id IN (SELECT unnest(?::VARCHAR[]))")
        return int(q.one(f"SELECT count(DISTINCT parent_span_id) AS n FROM {setup} WHERE streamed",
                         [passes]).get("n") or 0)

    def _filtered_after_text(self, q: Query) -> list[Finding]:
        """No moderation stage on record (a provider's filter, a foreign instrumentation): a pass that ended
        with ``content_filter`` after producing output tokens showed text before the refusal."""
        a = q.one(f"""SELECT count(*) AS n,
                             count(*) FILTER (WHERE finish_reason = 'content_filter' AND output_tokens > 0) AS cut,
                             median(output_tokens) FILTER (WHERE finish_reason = 'content_filter' AND output_tokens > 0)
                                 AS tokens,
                             (list(trace_id ORDER BY start_ns DESC)
                                 FILTER (WHERE finish_reason = 'content_filter' AND output_tokens > 0))[1:5] AS ids
                      FROM {q.passes}""")
        n, n_cut = int(a.get("n") or 0), int(a.get("cut") or 0)
        if not n_cut:
            return []
        ids = tuple(a["ids"])
        share = n_cut / n
        return [self.finding(
            S.SAFETY_MODERATION, "warning" if share < 0.2 else "critical",
            f"{n_cut} answers were filtered after they had produced text",
            f"They ended with content_filter after a median of {float(a['tokens'] or 0):.0f} output tokens: a "
            "streaming reader saw that text before the refusal.",
            [Evidence("passes filtered after output", n_cut, f"of {n}", ids),
             Evidence("median output tokens before the filter", a["tokens"], "tokens", ids)],
            ids, "Moderate the prompt before generating, or hold the stream back by the moderator's lag.",
            0.5 + 0.4 * share,
        )]
