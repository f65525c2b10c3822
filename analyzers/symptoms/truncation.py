"""Every truncation counts: passes that ended on the length cap, whatever the provider calls it (OpenAI
``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``: the ``passes`` view normalises them), and
what followed — structured output that does not parse, a tool call cut mid-arguments, JSON asked for in
words, the app going on without reading the reason.

One finding for the one cause (the cap), at ``gen.stop``: a warning when something structured was cut and
hurt — a structured answer that does not parse, or a cut answer or tool call the app went on with (a later
prompt carries it) — ``info`` otherwise (reported, but a clean run's cut prose, or cut calls an agent never
went on with, are no alarm).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, Row, attr, percentile, sample_ids
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.views import PASS_OPERATIONS

if TYPE_CHECKING:
    from llmtrace.analyzers.core.base import SymptomAnalyzer

CAUSE = "truncation:length-cap"
SAMPLE = 3000  # truncated passes read for what followed
# later passes of a cut pass's trace or session whose prompts are searched for its answer: the next turn of
# its conversation is among them even when several conversations share the trace (a fan-out's branches)
NEXT = 16
_JSON_WORDS = re.compile(r"\bjson\b|\{\s*\"", re.I)


def truncation_findings(analyzer: SymptomAnalyzer, q: Query) -> list[Finding]:
    total = int(q.one(f"SELECT count(*) AS n FROM {q.passes} WHERE finish_reason IS NOT NULL").get("n") or 0)
    rows = _cut_passes(q)
    if not rows:
        return []
    n = len(rows)
    cut = _Cut.of(rows)
    ids = sample_ids([r["trace_id"] for r in (cut.tools + cut.structured or rows)])
    share = n / max(1, total)
    severity, title, summary, score, stages = cut.verdict(n, total)
    return [analyzer.finding(
        S.GEN_STOP, severity, title, summary, _evidence(rows, cut, total, ids), ids,
        "Raise max_tokens above the longest answer you expect (or constrain the output to a schema), and treat "
        "finish_reason 'length' (Anthropic 'max_tokens') as a failure before parsing.",
        score, cause=CAUSE, stages=stages, affected_share=share,
        # what the cap wasted: the decode time of answers that cannot be used as they are
        loss_ms=sum(float(r["tpot_ms"] or 0) * float(r["output_tokens"] or 0) for r in cut.structured + cut.tools),
        loss_tokens=sum(float(r["output_tokens"] or 0) for r in cut.structured + cut.tools))]


def _cut_passes(q: Query) -> list[Row]:
    """The newest ``SAMPLE`` passes that ended on the length cap, newest first, each with what its answer was
    (output type, shape, whether it parses, whether structure was asked for), whether a constraint or
    penalties on structured output shaped it, whether the app read the stop reason, and whether the app went
    on with it (a later prompt carries it)."""
    return q.rows(f"""
        WITH cut AS (SELECT * FROM {q.passes} WHERE finish_reason = 'length' ORDER BY start_ns DESC LIMIT {SAMPLE}),
             ps AS (SELECT span_id, attributes FROM {q.spans} WHERE operation IN {PASS_OPERATIONS}
                    AND span_id IN (SELECT client_span_id FROM cut UNION ALL SELECT server_span_id FROM cut)),
             con AS (SELECT DISTINCT parent_span_id FROM {q.spans} WHERE stage = '{S.GEN_CONSTRAINED}'
                     AND parent_span_id IN (SELECT server_span_id FROM cut)
                     AND {attr(N.GEN_AI_OUTPUT_TYPE)} IS NOT NULL AND {attr(N.GEN_AI_OUTPUT_TYPE)} <> 'text'),
             -- the cut passes' penalty spans first, then their JSON (a filter on both would parse every one)
             pen_spans AS MATERIALIZED (SELECT parent_span_id, attributes FROM {q.spans} WHERE stage = '{S.GEN_PENALTIES}'
                                        AND parent_span_id IN (SELECT server_span_id FROM cut)),
             pen AS (SELECT DISTINCT parent_span_id FROM pen_spans
                     WHERE {attr(N.PENALTIES_ON_STRUCTURED_OUTPUT)}),
             checked AS (SELECT DISTINCT trace_id FROM {q.spans} WHERE stage = '{S.SAFETY_STOP_REASON}'
                         AND trace_id IN (SELECT trace_id FROM cut)),
             -- the app went on with a cut answer when a later prompt of its trace or session carries it: a
             -- segment (an assistant turn, a tool result, a user turn) hashed as the answer was, and not empty
             -- (an empty answer carries nothing); passes that only share the trace or session (a fan-out, the
             -- app's own next step) carried nothing of it
             outs AS (SELECT cut.span_id, cut.trace_id, cut.session_id, cut.end_ns,
                             {attr(N.OUTPUT_HASH, column='c.attributes')} AS h
                      FROM cut JOIN ps c ON c.span_id = cut.client_span_id
                      WHERE {attr(N.OUTPUT_HASH, column='c.attributes')} IS NOT NULL),
             pairs AS (SELECT o.span_id AS cut_id, o.h, p.client_span_id AS later_id, p.start_ns FROM outs o
                       JOIN {q.passes} p ON p.trace_id = o.trace_id AND p.start_ns >= o.end_ns
                       WHERE p.client_span_id IS NOT NULL
                       UNION SELECT o.span_id AS cut_id, o.h, p.client_span_id AS later_id, p.start_ns FROM outs o
                       JOIN {q.passes} p ON p.session_id = o.session_id AND p.start_ns >= o.end_ns
                       WHERE p.client_span_id IS NOT NULL),
             near AS (SELECT cut_id, h, later_id FROM (SELECT cut_id, h, later_id, row_number() OVER (
                          PARTITION BY cut_id ORDER BY start_ns, later_id) AS k FROM pairs) WHERE k <= {NEXT}),
             segs AS (SELECT span_id, {attr(N.PROMPT_SEGMENTS)} AS segs FROM {q.spans}
                      WHERE operation IN {PASS_OPERATIONS} AND span_id IN (SELECT later_id FROM near)),
             -- an assistant turn written back (tool calls and all) carries its answer's hash as "turn"
             -- (adapters/assistant_turn.py: the canonical form both hashes are over)
             later AS (SELECT DISTINCT near.cut_id AS span_id FROM near JOIN segs ON segs.span_id = near.later_id
                       WHERE (contains(segs.segs, '"hash":"' || near.h || '"')
                              AND NOT contains(segs.segs, '"hash":"' || near.h || '","chars":0,'))
                       OR contains(segs.segs, '"turn":"' || near.h || '"'))
        SELECT cut.trace_id, cut.output_tokens, cut.max_tokens, cut.finish_reason_raw, cut.tpot_ms,
               coalesce({attr(N.GEN_AI_OUTPUT_TYPE, column='c.attributes')},
                        {attr(N.GEN_AI_OUTPUT_TYPE, column='s.attributes')}) AS output_type,
               {attr(N.OUTPUT_SHAPE, column='c.attributes')} AS shape,
               {attr(N.OUTPUT_PARSES, column='c.attributes')} AS parses,
               {attr(N.OUTPUT_ASKED_IN_WORDS, column='c.attributes')} AS asked,
               {attr(N.OUTPUT_STRUCTURED_GUESS, column='c.attributes')} AS guessed,
               {attr(N.PROMPT_TEXT, column='c.attributes')} AS prompt_text,
               con.parent_span_id IS NOT NULL AS constrained,
               cut.server_span_id IN (SELECT parent_span_id FROM pen) AS penalised,
               cut.trace_id IN (SELECT trace_id FROM checked) AS checked,
               cut.span_id IN (SELECT span_id FROM later) AS continued
        FROM cut LEFT JOIN ps c ON c.span_id = cut.client_span_id
        LEFT JOIN ps s ON s.span_id = cut.server_span_id
        LEFT JOIN con ON con.parent_span_id = cut.server_span_id
        ORDER BY cut.start_ns DESC, cut.span_id""")


def _asked(r: Row) -> bool:
    """The app asked for structure: by schema, by a constraint or in words."""
    # The prompt's text is searched only where nothing read the answer and the turns (the adapters and the
    # collector record the answer's shape, and asked_in_words from the system prompt and the last user
    # turn): over the whole prompt, the arguments of earlier tool calls (`{"claim": ...`) read as an ask.
    return bool(r["output_type"] in ("json", "json_object", "json_schema") or r["constrained"]
                or r["asked"] in ("json", "xml")
                or (r["shape"] is None and r["guessed"] is None and isinstance(r["prompt_text"], str)
                    and _JSON_WORDS.search(r["prompt_text"]) is not None))


@dataclass(frozen=True, slots=True)
class _Cut:
    """The cut passes sorted by what was cut and what followed."""

    tools: list[Row]  # tool calls cut mid-arguments
    structured: list[Row]  # structured answers cut (asked for, or shaped so), penalised ones aside
    penalised: list[Row]  # structured answers bent by penalties: gen.penalties' finding
    broken: list[Row]  # structured answers asked for that do not parse
    broken_calls: list[Row]  # cut tool calls that do not parse
    unread: list[Row]  # structured answers and calls the app did not read the stop reason of
    continued: list[Row]  # ... and went on with (a later prompt carries them)

    @staticmethod
    def of(rows: list[Row]) -> _Cut:
        tools = [r for r in rows if r["output_type"] in ("tool_calls", "function_call", "tool_use")]
        structured = [r for r in rows if r not in tools and (
            _asked(r) or r["shape"] in ("json", "fenced", "xml") or r["parses"] is False)]
        # answers bent by penalties on structured output are gen.penalties' finding (it names the cause)
        penalised = [r for r in structured if r["penalised"]]
        structured = [r for r in structured if not r["penalised"]]
        # What does not parse is harm only where the app was going to parse it: a structured answer (JSON asked
        # for by schema, by a constraint or in words) is the app's to parse, so one that does not parse is
        # blamed as it stands. A cut tool call (an answer the request's tools shaped: structured calls, or a call
        # the backend sent back as its text, `{"name": "cont` under tool_choice required / any) never parses
        # either, but that is the same harm as any cut call: it matters when the app went on with it (sent it
        # back in a later prompt, below), not because its arguments are incomplete. An agent whose next steps
        # are its own (a loop that re-asks one lookup, a fan-out over other records) never read them. A call
        # dispatched without being written back is not seen: the adapters keep no call ids of an answer to
        # match an execute_tool span to, and a tool result sent back comes with the assistant turn that asked
        # for it (its "turn" hash, below). An answer that only looks structured (the model chose to open a brace
        # or a fence; nobody asked for JSON) was not the app's to parse either: a real model does that after
        # tool turns in the history, and cut at the cap it never parses. Like a cut call, it is harm when the
        # app went on with it, not for failing to parse.
        return _Cut(
            tools=tools, structured=structured, penalised=penalised,
            broken=[r for r in structured if r["parses"] is False and _asked(r)],
            broken_calls=[r for r in tools if r["parses"] is False and not r["penalised"]],
            unread=[r for r in structured + tools if not r["checked"]],
            # the app went on with a structured answer or tool call that was cut: a later prompt carries it
            continued=[r for r in structured + tools if r["continued"] and not r["checked"]])

    def verdict(self, n: int, total: int) -> tuple[Severity, str, str, float, tuple[str, ...]]:
        """Severity, title, summary, score and stages of the one finding, from what the cap cut and hurt."""
        share = n / max(1, total)
        hurt = len(self.structured) + len(self.tools)
        # Blame needs a consequence on record (a structured answer did not parse, or the app carried on with a
        # cut answer or call); a cap that only shortened answers, or cut calls nobody went on with, is reported
        # as info, so a run that is otherwise clean stays quiet.
        harmed = len(self.broken) + len(self.continued)
        if hurt and harmed:
            what = ("tool calls" if len(self.tools) >= len(self.structured) else "structured answers")
            summary = (f"{n} of {total} passes stopped on the length cap; {hurt} of them were {what} that cannot "
                       "be complete" + (f", {len(self.broken)} do not parse" if self.broken else "")
                       + (f", and the app went on after {len(self.continued)} of them" if self.continued else "")
                       + ".")
            return ("warning", f"{hurt} {what} were cut at max_tokens ({hurt / max(1, total):.0%} of passes)",
                    summary, 0.55 + 0.4 * min(1.0, hurt / max(1, total)),
                    (S.GEN_STOP, S.SAFETY_STOP_REASON) if self.unread else (S.GEN_STOP,))
        if hurt:
            what = ("tool calls" if len(self.tools) >= len(self.structured)
                    else "structured answers (JSON asked for)" if any(_asked(r) for r in self.structured)
                    else "answers shaped like JSON (none asked for)")
            return ("info", f"{hurt} {what} were cut at max_tokens ({n} of {total} passes hit the cap)",
                    "They cannot be complete; nothing on record shows a consumer failing on them yet (no "
                    "structured answer that fails to parse, no later prompt carrying a cut answer or call), so "
                    "this is reported rather than blamed.", 0.3 + 0.1 * share, (S.GEN_STOP, S.SAFETY_STOP_REASON))
        return ("info", f"{n} of {total} answers were cut at max_tokens",
                "Prose answers that hit the cap end mid-sentence; nothing structured was cut.", 0.1 + 0.1 * share,
                (S.GEN_STOP,))


def _evidence(rows: list[Row], cut: _Cut, total: int, ids: tuple[str, ...]) -> list[Evidence]:
    """What the finding quotes: the cut passes, the cap against the answers, and each kind of cut and harm."""
    n = len(rows)
    spellings = sorted({str(r["finish_reason_raw"]) for r in rows if r["finish_reason_raw"]})
    outs = [float(r["output_tokens"]) for r in rows if r["output_tokens"] is not None]
    caps = [float(r["max_tokens"]) for r in rows if r["max_tokens"] is not None]
    cap = percentile(caps, 0.5)
    ev = [Evidence("passes that ended on the length cap", n, f"of {total}", ids),
          Evidence("finish reasons as the provider spelt them", ", ".join(spellings[:4]), "", ids)]
    if cap is not None:
        ev.append(Evidence("max_tokens", cap, "tokens", ids, baseline=percentile(outs, 0.5)))
    kinds = (("structured answers cut (JSON asked for, by schema or in words)", cut.structured),
             ("answers that do not parse", cut.broken),
             ("tool calls cut mid-arguments", cut.tools),
             ("cut tool calls that do not parse (harm only if the app went on with them)", cut.broken_calls),
             ("cut structured answers generated under repetition penalties (see gen.penalties)", cut.penalised),
             ("cut answers the app went on with, without checking the stop reason", cut.continued))
    ev += [Evidence(label, len(these), "", sample_ids([r["trace_id"] for r in these])) for label, these in kinds
           if these]
    return ev
