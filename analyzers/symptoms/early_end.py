"""Silent: answers end early with finish reason "stop". A stop string that also occurs inside the answer's own
content (the "." of "7.5 km", of "approx." or "e.g.", of a version "v2.1"; a newline inside a code block; a quote
inside a JSON string) ends every answer a few tokens in, and the finish reason says "stop" as it does for an
answer that is done. Read from ``gen.stop``'s end values (tracer/reading/stop_context.py): the end kind, the stop
string's class, what the output was inside of and what preceded the cut; classes and offsets only.

A stop string that fires at a natural end (after a sentence's end, closing an open code block, at the end of a
complete JSON value) is no finding. One that fires after a letter with nothing open is read as a finding only
where it fired far earlier than the answers of the same service and prompt template (its system prompt's digest)
that ended on their own. Where the recorder could not tell a stop string from the turn's end (OpenAI's
finish reason "stop", a foreign span: ``stop_unknown`` on every pass), the answers whose end reads as an answer's
own end (a sentence's end, a closed JSON value, nothing left open) stand for those, and a stop that fired at such
an end is never early.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query, Row
from llmtrace.tracer.reading.stop_context import CONTENT_LIKE, LINE_ENDS, SHORT_PUNCT
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

CAUSE = "stop-string-inside-content"
# fewer answers than this with a stop string in content say nothing (one odd answer is no pattern)
MIN_PASSES = 2
# a stop that fired after a letter counts as early when the answer is this much shorter than the median of the
# same service's answers that ended on their own
EARLY_RATIO = 0.25
MIN_BASELINE = 3
_KINDS = "('stop_string', 'stop_unknown')"
_WHERE = {"code_fence": "inside a code block", "json_string": "inside a JSON string", "json": "inside an unfinished JSON value"}
_BEFORE = {"digit": "mid-number (after a digit)", "abbreviation": "after an abbreviation", "empty": "before any text",
           "letter": "mid-sentence (after a letter)", "space": "after a space", "punct": "after punctuation"}


@dataclass(frozen=True, slots=True)
class _Group:
    cls: str
    chars: int
    inside: str
    before: str
    n: int
    ids: tuple[str, ...]


class EarlyEnd(SymptomAnalyzer):
    symptom = "early_end"

    def find(self, q: Query) -> list[Finding]:
        rows, n_all = _stopped_inside(q)
        cut = sum(int(r["n"]) for r in rows)
        if not rows or cut < MIN_PASSES or not n_all:
            return []
        top = rows[0]
        share = cut / n_all
        ids = tuple(top["ids"])
        where = _WHERE.get(top["inside"], "")
        before = _BEFORE.get(top["before"], top["before"])
        at = " and ".join(x for x in (where, before if top["before"] in ("digit", "abbreviation") else "") if x)
        if not at or not top["in_content"]:  # a stop string not made of content: only how early it fired tells
            at = f"far earlier than the answers that ended on their own ({top['at_char']:.0f} vs {top['med']:.0f} chars)"
        sure = bool(top["sure"])
        named = top["cls"] != "unknown"  # the request's stop strings on record (a foreign span may not say them)
        stop_words = (f"a stop string ({top['cls']}, {top['chars']} char{'s' if top['chars'] != 1 else ''})" if named
                      else "a stop string the spans do not name")
        ev = [Evidence("answers ended by a stop string inside their content", cut, f"of {n_all}", ids),
              Evidence("stop string (class, length)", f"{top['cls']}, {top['chars']}" if named else
                       "not recorded by the instrumentation", "chars" if named else "", ids),
              Evidence("where it fired", at, "", ids),
              Evidence("what preceded the cut", top["before"], "", ids),
              Evidence("what the cut was inside", top["inside"], "", ids),
              Evidence("char of the output where it ended (median)", top["at_char"], "chars", ids,
                       baseline=top["med"]),
              Evidence("share of passes", round(share, 3), "", ids)]
        if not sure:
            ev.append(Evidence("finish reason", "stop (the provider does not say whether a stop string or the end of "
                               "the turn ended it)", "", ids))
        for r in rows[1:3]:
            ev.append(Evidence(f"also: {r['cls']} stop string {_WHERE.get(r['inside'], '')} {r['before']}".strip(),
                               r["n"], "answers", tuple(r["ids"])))
        return [self.finding(
            # early only by length: a warning, info for answers cut before any text (a model that opens with a
            # newline under stop "\n": an empty answer, not a stop string met inside content)
            S.GEN_STOP, severity_for(share) if top["in_content"] else "info" if top["before"] == "empty" else "warning",
            f"{cut} answers were ended by {stop_words} {at}",
            f"The request's stop string also occurs inside the answer's own content, so generation stopped there "
            f"with finish reason 'stop', which reads as a finished answer. {share:.0%} of passes ended this way"
            + ("" if sure else " (the provider said 'stop'; where the answer ends shows a stop string cut it)") + ".",
            ev, ids,
            "Pick a stop string that cannot occur in the answer (a marker of its own, a special token), or end on "
            "structure (response_format, a closing fence) instead; read the end kind (llmtrace.stop.kind) before "
            "using an answer that ended on 'stop'.",
            0.55 + 0.35 * share, cause=CAUSE, stages=(S.GEN_STOP, S.SAFETY_STOP_REASON), affected_share=share)]


def _stopped_inside(q: Query) -> tuple[list[Row], int]:
    """The passes a stop string ended inside their content or far earlier than their template's answers,
    grouped by the stop string's class, length and place (most first), and how many passes there were."""
    stop = q.stage_sql(S.GEN_STOP, {
        "kind": N.STOP_KIND, "at_char": N.STOP_AT_CHAR, "before": N.STOP_PRECEDED_BY,
        "inside": N.STOP_INSIDE, "cls": N.STOP_STRING_CLASS, "chars": N.STOP_STRING_CHARS,
        "hash": N.STOP_STRING_HASH, "tokens": N.GEN_AI_USAGE_OUTPUT_TOKENS})
    # One row a pass: the server's span where it has one (it knows which stop string matched; the client
    # of an OpenAI-style API knows only "stop"), the client's otherwise. A span under a server pass span is
    # keyed by the logical pass it joined, one under a client pass span by its parent already.
    per_pass = f"""
        SELECT coalesce(ps.span_id, g.parent_span_id) AS pass, g.*, coalesce(ps.service, g.service) AS svc
        FROM {stop} g LEFT JOIN {q.passes} ps ON ps.server_span_id = g.parent_span_id
        WHERE g.kind IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY coalesce(ps.span_id, g.parent_span_id)
                                   ORDER BY (ps.span_id IS NOT NULL) DESC, (g.kind = 'stop_unknown')) = 1"""
    # the app's prompt template, as far as the store says: the system prompt's digest the client recorded for
    # the pass ('' where none was: server-only traffic, a foreign span)
    system = q.stage_sql(S.INTAKE_SYSTEM_PROMPT, {"sys": N.SYSTEM_HASH})
    passes = q.temp_table(f"""
        SELECT p.*, coalesce(s.sys, '') AS tpl FROM ({per_pass}) p
        LEFT JOIN (SELECT parent_span_id, any_value(sys) AS sys FROM {system} GROUP BY parent_span_id) s
          ON s.parent_span_id = p.pass""")
    # what answers that ended on their own look like, per service and template: the yardstick for "far
    # earlier". A template's answers are compared with its own only (a first-line prompt cut at "\n" after
    # "Yes" is not early beside the same service's essays)
    # A "stop" the recorder could not tell from a stop string (OpenAI's finish reason, a foreign span) counts
    # among them where its end reads as an answer's own end (a sentence's end, a closed JSON value, nothing
    # left open): otherwise a client of an OpenAI-style API, where every pass of a template with stop strings
    # is stop_unknown, has no yardstick at all
    natural = "(coalesce({p}inside, 'none') = 'none' AND {p}before IN ('sentence_end', 'punct'))"
    base = f"""SELECT svc, tpl, median(at_char) AS med, count(*) AS n FROM {passes}
               WHERE (kind IN ('end_turn', 'length', 'tool_call') OR (kind = 'stop_unknown' AND {natural.format(p='')}))
                 AND at_char IS NOT NULL GROUP BY svc, tpl"""
    # the rule of stop_context.inside_content, in SQL: a stop string made of ordinary content (a marker the
    # app chose fires where the model wrote it on purpose), met inside a JSON value or code block, or after
    # a digit or an abbreviation
    like = ", ".join(f"'{c}'" for c in sorted(CONTENT_LIKE))
    line_ends = ", ".join(f"'{c}'" for c in sorted(LINE_ENDS))
    inside = (f"((p.cls IS NULL OR p.cls IN ({like}) OR (p.cls = 'punct' AND p.chars <= {SHORT_PUNCT})) AND "
              "(p.inside IN ('json_string', 'json', 'code_fence') OR "
              f"(p.before IN ('digit', 'abbreviation') AND coalesce(p.cls, '') NOT IN ({line_ends}))))")
    # (a stop that fired where an answer ends on its own, "Yes." beside the template's letters, is not early)
    early = f"(b.n >= {MIN_BASELINE} AND p.at_char < {EARLY_RATIO} * b.med AND NOT {natural.format(p='p.')})"
    rows = q.rows(f"""
        SELECT coalesce(p.cls, 'unknown') AS cls, coalesce(p.chars, 0) AS chars, coalesce(p.inside, 'none') AS inside,
               coalesce(p.before, 'other') AS before, count(*) AS n, any_value(p.kind) AS kind,
               bool_or(p.kind = 'stop_string') AS sure, median(p.at_char) AS at_char, any_value(b.med) AS med,
               bool_or({inside}) AS in_content,
               (list(p.trace_id ORDER BY p.start_ns DESC))[1:5] AS ids
        FROM {passes} p LEFT JOIN ({base}) b ON b.svc = p.svc AND b.tpl = p.tpl
        WHERE p.kind IN {_KINDS} AND ({inside} OR {early})
        GROUP BY ALL ORDER BY n DESC""")
    total = q.one(f"SELECT count(*) AS n, count(*) FILTER (WHERE kind IN {_KINDS}) AS by_stop FROM {passes}")
    return rows, int(total.get("n") or 0)
