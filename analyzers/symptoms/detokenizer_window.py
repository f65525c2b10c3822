"""Silent: detokenizer window. A hold-back window too small for UTF-8 (under 3 bytes) or shorter than the
stop strings lets half-characters and the first characters of a stop string reach the caller, where a
later correction or trim may hide them in the final text but not in the stream."""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class DetokenizerWindow(SymptomAnalyzer):
    symptom = "detokenizer_window"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        # both stages' spans in one scan of the store (a scan a stage read every span's stage twice); an
        # export's per-stage datasets are read as they are
        src = None if q.exported else "ds"
        both = "" if src is None else f"WITH ds AS MATERIALIZED {q.stage_spans_sql([S.GEN_DETOKENIZATION, S.GEN_STOP])}"
        detok = q.stage_sql(S.GEN_DETOKENIZATION, {
            "held": N.DETOK_HELD_BACK_MAX, "repl": N.DETOK_REPLACEMENT_CHARS, "stop_hold": N.DETOK_STOP_HOLDBACK_CHARS,
            "leaked": N.DETOK_STOP_LEAKED_CHARS, "hold": N.DETOK_HOLD_BACK}, source=src)
        # the stop string's text is kept with full capture only; its length and class in every mode
        stop = q.stage_sql(S.GEN_STOP, {"matched_text": N.STOP_MATCHED, "chars": N.STOP_STRING_CHARS,
                                        "cls": N.STOP_STRING_CLASS}, source=src)
        # A stop string (not an end token like <|im_end|>, nor a reason like constraint_complete) longer than
        # the hold-back that was active: 0 means nothing was ever held, which says nothing about the window.
        # The engine's own count of stop-string characters streamed before the match is the direct evidence;
        # where it is recorded the hold-back comparison is not used (the most held is the longest partial match
        # seen, which is short whenever one token completes several characters of the stop string).
        chopped = ("(d.leaked > 0 OR (d.leaked IS NULL AND length(s.matched) > 1 AND d.stop_hold > 0 "
                   "AND d.stop_hold < coalesce(s.chars, length(s.matched)) - 1 "
                   "AND NOT regexp_matches(s.matched, '^(<\\|.*\\|>|</?s>|[a-z_]+)$')))")
        # No byte hold-back at all while replacement characters went out: split characters were emitted. Where
        # the engine says its hold-back was on, nothing was held because no character was ever partial, and
        # its U+FFFD are bytes the model produced that never formed one (mangled_text reports those).
        narrow = "d.held = 0 AND coalesce(d.repl, 0) > 0 AND NOT coalesce(d.hold, false)"
        # each span's two tests made once (as aggregate filters, the engine repeats one per aggregate)
        a = q.one(f"""
            {both}
            SELECT count(*) AS n, count(*) FILTER (WHERE c) AS chopped,
                   any_value(stop_hold) FILTER (WHERE c) AS stop_hold,
                   any_value(matched) FILTER (WHERE c) AS matched, any_value(chars) FILTER (WHERE c) AS chars,
                   sum(coalesce(leaked, 0)) FILTER (WHERE c) AS leaked,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE c))[1:5] AS chopped_ids,
                   count(*) FILTER (WHERE nw) AS narrow, max(held) FILTER (WHERE nw) AS held,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE nw))[1:5] AS narrow_ids
            FROM (SELECT d.trace_id, d.start_ns, d.stop_hold, d.leaked, d.held,
                         coalesce(s.matched_text, s.cls) AS matched, coalesce(s.chars, length(s.matched_text)) AS chars,
                         {chopped} AS c,
                         {narrow} AS nw
                  FROM {detok} d LEFT JOIN (SELECT *, matched_text AS matched FROM {stop}) s
                       ON s.parent_span_id = d.parent_span_id)""")
        out: list[Finding] = []
        n = int(a.get("n") or 0)
        if a.get("chopped"):
            ids = tuple(a["chopped_ids"])
            out.append(self.finding(
                S.GEN_DETOKENIZATION, "warning", f"{a['chopped']} streams may have shown part of a stop string",
                "The stop-string hold-back is shorter than the stop string that matched, so its first characters "
                "were streamed before the match was known.",
                [Evidence("streams with a short stop hold-back", a["chopped"], f"of {n}", ids),
                 Evidence("stop hold-back", a["stop_hold"], "chars", ids,
                          baseline=(a["chars"] - 1) if a.get("chars") else None),
                 Evidence("stop string", a["matched"], "", ids),
                 Evidence("stop-string characters streamed before the match", a["leaked"], "chars", ids)],
                ids, "Hold back at least len(longest stop string) - 1 characters while streaming.", 0.5,
            ))
        if a.get("narrow"):
            ids = tuple(a["narrow_ids"])
            out.append(self.finding(
                S.GEN_DETOKENIZATION, "warning", f"{a['narrow']} streams decoded without holding back partial characters",
                "UTF-8 characters take up to 4 bytes; a decoder that holds none back emits replacement characters that a "
                "later token corrects — the stream shows them, the final text does not.",
                [Evidence("streams with a narrow window", a["narrow"], f"of {n}", ids),
                 Evidence("most bytes held back", a["held"], "bytes", ids, baseline=3)],
                ids, "Hold back incomplete UTF-8 sequences (up to 3 bytes) before emitting.", 0.45,
            ))
        return out
