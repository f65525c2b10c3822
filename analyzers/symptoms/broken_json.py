"""Broken or half-written JSON: Safety & shaping → Generation.

Outputs that failed to parse (``safety.stop_reason`` parse_ok=false) are traced back to why generation
stopped: the max_tokens cap (``gen.stop``), a content filter, penalties on structured output, or a
constraint that dead-ended. Every pass that ended on the length cap counts, with what followed, even
without a parse check (analyzers/symptoms/truncation.py).
"""

from __future__ import annotations

from dataclasses import replace

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, Row, attr, percentile, sample_ids
from llmtrace.analyzers.symptoms.truncation import CAUSE, truncation_findings
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class BrokenJson(SymptomAnalyzer):
    symptom = "broken_json"

    def find(self, q: Query) -> list[Finding]:
        # A check inside a pass's trace reads that pass's finish reason; a check the app ran after the call
        # (its own trace) is matched to the pass that ended just before it.
        checks = q.rows(f"""
            WITH sr AS (
                SELECT trace_id, span_id, start_ns,
                       {attr(N.STOP_REASON_READ)} AS read,
                       {attr(N.STOP_REASON_TRUNCATED)} AS truncated,
                       {attr(N.STOP_REASON_PARSE_OK)} AS parse_ok,
                       {attr(N.STOP_REASON_FINISH_REASON)} AS own_reason
                FROM {q.spans} WHERE stage = '{S.SAFETY_STOP_REASON}'
                  AND {attr(N.STOP_REASON_PARSE_OK)} = false),
            p AS (SELECT trace_id, finish_reason, output_tokens, max_tokens, start_ns, end_ns FROM {q.passes}
                  WHERE finish_reason IS NOT NULL),
            same AS (SELECT sr.span_id, arg_max(p.finish_reason, p.start_ns) AS finish_reason,
                            arg_max(p.output_tokens, p.start_ns) AS output_tokens,
                            arg_max(p.max_tokens, p.start_ns) AS max_tokens
                     FROM sr JOIN p ON p.trace_id = sr.trace_id WHERE p.start_ns <= sr.start_ns GROUP BY sr.span_id),
            orphan AS (SELECT * FROM sr WHERE span_id NOT IN (SELECT span_id FROM same)),
            near AS (SELECT orphan.span_id, p.finish_reason, p.output_tokens, p.max_tokens
                     FROM orphan ASOF LEFT JOIN p ON orphan.start_ns >= p.end_ns)
            SELECT sr.trace_id, sr.read, sr.truncated, sr.parse_ok,
                   coalesce(same.finish_reason, sr.own_reason, near.finish_reason) AS finish_reason,
                   CASE WHEN same.span_id IS NOT NULL THEN same.output_tokens
                        WHEN sr.own_reason IS NULL OR sr.own_reason = near.finish_reason THEN near.output_tokens END AS output_tokens,
                   CASE WHEN same.span_id IS NOT NULL THEN same.max_tokens
                        WHEN sr.own_reason IS NULL OR sr.own_reason = near.finish_reason THEN near.max_tokens END AS max_tokens
            FROM sr LEFT JOIN same ON same.span_id = sr.span_id LEFT JOIN near ON near.span_id = sr.span_id
            ORDER BY sr.start_ns DESC, sr.span_id""")
        failed = [c for c in checks if c["parse_ok"] is False]
        out: list[Finding] = []
        if failed:
            out += self._explain_failures(q, failed, q.count(S.SAFETY_STOP_REASON))
        out += truncation_findings(self, q)
        out += self._penalised_structure(q)
        return out

    def _explain_failures(self, q: Query, failed: list[Row], checked: int) -> list[Finding]:
        out: list[Finding] = []
        n = len(failed)
        ids = sample_ids([c["trace_id"] for c in failed])
        by_reason: dict[str, list[Row]] = {}
        for c in failed:
            reason = c["finish_reason"] or ("length" if c["truncated"] else "unknown")
            by_reason.setdefault(str(reason), []).append(c)
        length = by_reason.get("length", [])
        if length:
            share = len(length) / n
            lids = sample_ids([c["trace_id"] for c in length])
            outs = [float(c["output_tokens"]) for c in length if c["output_tokens"] is not None]
            caps = [float(c["max_tokens"]) for c in length if c["max_tokens"] is not None]
            p95 = percentile(outs, 0.95)
            cap = percentile(caps, 0.5)
            unread = sum(1 for c in length if c["read"] is False)
            out.append(self.finding(
                S.GEN_STOP, severity_for(share, 0.2, 0.5),
                f"{share:.0%} of parse failures stopped at max_tokens",
                f"{len(length)} of {n} outputs that failed to parse ended with finish reason 'length': the cap "
                f"cut them mid-structure" + (f", and {unread} of them were passed on without reading the stop "
                                             "reason" if unread else "") + ".",
                [Evidence("parse failures", n, f"of {checked} checked", ids),
                 Evidence("of those, finish reason 'length'", len(length), "", lids),
                 Evidence("p95 output tokens", p95, "tokens", lids, baseline=cap),
                 Evidence("max_tokens", cap, "tokens", lids)],
                lids, "Raise max_tokens above the p95 output length (or constrain the output to a JSON schema), "
                "and check finish_reason before parsing (safety.stop_reason).", 0.5 + 0.5 * share, cause=CAUSE,
            ))
            if unread:
                out.append(self.finding(
                    S.SAFETY_STOP_REASON, "warning", f"{unread} truncated outputs were used without reading the stop reason",
                    "The app parsed output that generation had cut off; a check of finish_reason would have caught it.",
                    [Evidence("truncated outputs not checked", unread, "", lids)], lids,
                    "Treat finish_reason 'length' as a failure (retry with a higher cap) before parsing.",
                    0.4 * share, cause=CAUSE, stages=(S.GEN_STOP, S.SAFETY_STOP_REASON),
                ))
        filtered = by_reason.get("content_filter", [])
        if filtered:
            out.append(self._counted(
                S.SAFETY_MODERATION, "warning", filtered, n, f"{len(filtered)} parse failures were cut by a content filter",
                "Moderation stopped the output part-way through the structure.",
                "parse failures with finish reason content_filter", "Open safety.moderation on the listed traces.", 0.5,
            ))
        stopped = by_reason.get("stop", [])
        if stopped:
            out += self._stop_causes(q, stopped, n)
        return out

    def _penalised_structure(self, q: Query) -> list[Finding]:
        """Structured output generated under repetition/frequency/presence penalties, with or without a parse
        check on record: the penalties push down the very tokens JSON must repeat (quotes, braces, keys)."""
        rel = q.stage_sql(S.GEN_PENALTIES, {"structured": N.PENALTIES_ON_STRUCTURED_OUTPUT,
                                            "rep": N.PENALTIES_REPETITION,
                                            "freq": N.GEN_AI_REQUEST_FREQUENCY_PENALTY,
                                            "pres": N.GEN_AI_REQUEST_PRESENCE_PENALTY})
        # per pass, not per span: the app's middleware and the server each record the stage for one pass
        row = q.one(f"""SELECT count(DISTINCT trace_id) FILTER (WHERE structured) AS n, count(DISTINCT trace_id) AS total,
                               median(rep) FILTER (WHERE structured) AS rep,
                               median(freq) FILTER (WHERE structured) AS freq, median(pres) FILTER (WHERE structured) AS pres,
                               (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE structured))[1:5] AS ids FROM {rel}""")
        n = int(row.get("n") or 0)
        if n < 2:
            return []
        ids = tuple(row["ids"] or ())
        return [self.finding(
            S.GEN_PENALTIES, "warning", f"{n} structured outputs were generated under repetition penalties",
            "Penalties push down tokens JSON must repeat (quotes, braces, keys), so the structure bends or breaks.",
            [Evidence("structured passes with penalties on", n, f"of {row['total']}", ids),
             Evidence("repetition penalty", row["rep"], "", ids, baseline=1.0),
             Evidence("frequency / presence penalty", f"{row['freq'] or 0:g} / {row['pres'] or 0:g}", "", ids)],
            ids, "Turn repetition/frequency/presence penalties off for structured output.", 0.6,
            cause="penalty-on-structure", affected_share=n / max(1, int(row["total"] or 1)))]

    def _stop_causes(self, q: Query, stopped: list[Row], n: int) -> list[Finding]:
        """Parse failures that stopped normally: look for penalties on structure or a dead-ended constraint."""
        ids = [str(c["trace_id"]) for c in stopped]
        placeholders = ", ".join("?" for _ in ids)
        pen = q.rows(f"""SELECT trace_id FROM {q.spans} WHERE stage = '{S.GEN_PENALTIES}'
                         AND {attr(N.PENALTIES_ON_STRUCTURED_OUTPUT)} AND trace_id IN ({placeholders})
                         ORDER BY start_ns DESC""", ids)
        dead = q.rows(f"""SELECT trace_id FROM {q.spans} WHERE stage = '{S.GEN_CONSTRAINED}'
                          AND {attr(N.CONSTRAINT_DEAD_END)} AND trace_id IN ({placeholders})
                          ORDER BY start_ns DESC""", ids)
        out: list[Finding] = []
        if pen:
            out.append(self._counted(
                S.GEN_PENALTIES, "warning", pen, n, f"{len(pen)} structured outputs ran with repetition penalties",
                "Penalties push down tokens JSON must repeat (quotes, braces, keys), so the structure breaks.",
                "parse failures with penalties on",
                "Turn repetition/frequency/presence penalties off for structured output.", 0.5,
            ))
            out[-1] = replace(out[-1], cause="penalty-on-structure")
        if dead:
            out.append(self._counted(
                S.GEN_CONSTRAINED, "warning", dead, n, f"{len(dead)} constrained outputs dead-ended",
                "The grammar left only filler tokens, so the output ran on without closing.",
                "dead-ended constraints", "Open gen.constrained: simplify the schema or raise max_tokens.", 0.5,
            ))
        if not out:
            out.append(self._counted(
                S.SAFETY_STOP_REASON, "info", stopped, n, f"{len(stopped)} outputs stopped normally yet did not parse",
                "Generation ended on its own; the model wrote invalid structure.",
                "parse failures with finish reason 'stop'",
                "Constrain the output with a JSON schema (response_format) instead of asking for JSON in words.", 0.3,
            ))
        return out

    def _counted(self, stage: str, severity: Severity, rows: list[Row], n: int, title: str,
                 summary: str, label: str, next_check: str, weight: float) -> Finding:
        """A finding whose one piece of evidence is how many of the ``n`` parse failures ``rows`` are; its
        score is ``weight`` times that share."""
        ids = sample_ids([r["trace_id"] for r in rows])
        return self.finding(stage, severity, title, summary, [Evidence(label, len(rows), f"of {n}", ids)], ids,
                            next_check, weight * len(rows) / n)
