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
from typing import TYPE_CHECKING

from llmtrace.analyzers.finding import Evidence, Finding, Severity
from llmtrace.analyzers.query import Query, Row, attr, percentile, sample_ids
from llmtrace.tracer.storage.views import PASS_OPERATIONS

if TYPE_CHECKING:
    from llmtrace.analyzers.base import SymptomAnalyzer

CAUSE = "truncation:length-cap"
SAMPLE = 3000  # truncated passes read for what followed
# later passes of a cut pass's trace or session whose prompts are searched for its answer: the next turn of
# its conversation is among them even when several conversations share the trace (a fan-out's branches)
NEXT = 16
_JSON_WORDS = re.compile(r"\bjson\b|\{\s*\"", re.I)


def truncation_findings(analyzer: SymptomAnalyzer, q: Query) -> list[Finding]:
    total = int(q.one(f"SELECT count(*) AS n FROM {q.passes} WHERE finish_reason IS NOT NULL").get("n") or 0)
    rows = q.rows(f"""
        WITH cut AS (SELECT * FROM {q.passes} WHERE finish_reason = 'length' ORDER BY start_ns DESC LIMIT {SAMPLE}),
             ps AS (SELECT span_id, attributes FROM {q.spans} WHERE operation IN {PASS_OPERATIONS}
                    AND span_id IN (SELECT client_span_id FROM cut UNION ALL SELECT server_span_id FROM cut)),
             con AS (SELECT DISTINCT parent_span_id FROM {q.spans} WHERE stage = 'gen.constrained'
                     AND parent_span_id IN (SELECT server_span_id FROM cut)
                     AND {attr('gen_ai.output.type')} IS NOT NULL AND {attr('gen_ai.output.type')} <> 'text'),
             -- the cut passes' penalty spans first, then their JSON (a filter on both would parse every one)
             pen_spans AS MATERIALIZED (SELECT parent_span_id, attributes FROM {q.spans} WHERE stage = 'gen.penalties'
                                        AND parent_span_id IN (SELECT server_span_id FROM cut)),
             pen AS (SELECT DISTINCT parent_span_id FROM pen_spans
                     WHERE {attr('llmtrace.penalties.on_structured_output', 'bool')}),
             checked AS (SELECT DISTINCT trace_id FROM {q.spans} WHERE stage = 'safety.stop_reason'
                         AND trace_id IN (SELECT trace_id FROM cut)),
             -- the app went on with a cut answer when a later prompt of its trace or session carries it: a
             -- segment (an assistant turn, a tool result, a user turn) hashed as the answer was, and not empty
             -- (an empty answer carries nothing); passes that only share the trace or session (a fan-out, the
             -- app's own next step) carried nothing of it
             outs AS (SELECT cut.span_id, cut.trace_id, cut.session_id, cut.end_ns,
                             {attr('llmtrace.output.hash', 'str', 'c.attributes')} AS h
                      FROM cut JOIN ps c ON c.span_id = cut.client_span_id
                      WHERE {attr('llmtrace.output.hash', 'str', 'c.attributes')} IS NOT NULL),
             pairs AS (SELECT o.span_id AS cut_id, o.h, p.client_span_id AS later_id, p.start_ns FROM outs o
                       JOIN {q.passes} p ON p.trace_id = o.trace_id AND p.start_ns >= o.end_ns
                       WHERE p.client_span_id IS NOT NULL
                       UNION SELECT o.span_id AS cut_id, o.h, p.client_span_id AS later_id, p.start_ns FROM outs o
                       JOIN {q.passes} p ON p.session_id = o.session_id AND p.start_ns >= o.end_ns
                       WHERE p.client_span_id IS NOT NULL),
             near AS (SELECT cut_id, h, later_id FROM (SELECT cut_id, h, later_id, row_number() OVER (
                          PARTITION BY cut_id ORDER BY start_ns, later_id) AS k FROM pairs) WHERE k <= {NEXT}),
             segs AS (SELECT span_id, {attr('llmtrace.prompt.segments')} AS segs FROM {q.spans}
                      WHERE operation IN {PASS_OPERATIONS} AND span_id IN (SELECT later_id FROM near)),
             -- an assistant turn written back (tool calls and all) carries its answer's hash as "turn"
             -- (adapters/assistant_turn.py: the canonical form both hashes are over)
             later AS (SELECT DISTINCT near.cut_id AS span_id FROM near JOIN segs ON segs.span_id = near.later_id
                       WHERE (contains(segs.segs, '"hash":"' || near.h || '"')
                              AND NOT contains(segs.segs, '"hash":"' || near.h || '","chars":0,'))
                       OR contains(segs.segs, '"turn":"' || near.h || '"'))
        SELECT cut.trace_id, cut.output_tokens, cut.max_tokens, cut.finish_reason_raw, cut.tpot_ms,
               coalesce({attr('gen_ai.output.type', 'str', 'c.attributes')},
                        {attr('gen_ai.output.type', 'str', 's.attributes')}) AS output_type,
               {attr('llmtrace.output.shape', 'str', 'c.attributes')} AS shape,
               {attr('llmtrace.output.parses', 'bool', 'c.attributes')} AS parses,
               {attr('llmtrace.output.asked_in_words', 'str', 'c.attributes')} AS asked,
               {attr('llmtrace.output.structured_guess', 'bool', 'c.attributes')} AS guessed,
               {attr('llmtrace.prompt.text', 'str', 'c.attributes')} AS prompt_text,
               con.parent_span_id IS NOT NULL AS constrained,
               cut.server_span_id IN (SELECT parent_span_id FROM pen) AS penalised,
               cut.trace_id IN (SELECT trace_id FROM checked) AS checked,
               cut.span_id IN (SELECT span_id FROM later) AS continued
        FROM cut LEFT JOIN ps c ON c.span_id = cut.client_span_id
        LEFT JOIN ps s ON s.span_id = cut.server_span_id
        LEFT JOIN con ON con.parent_span_id = cut.server_span_id
        ORDER BY cut.start_ns DESC, cut.span_id""")
    if not rows:
        return []
    n = len(rows)
    tools = [r for r in rows if r["output_type"] in ("tool_calls", "function_call", "tool_use")]
    def asked(r: Row) -> bool:  # the app asked for structure: by schema, by a constraint or in words
        # The prompt's text is searched only where nothing read the answer and the turns (the adapters and the
        # collector record the answer's shape, and asked_in_words from the system prompt and the last user
        # turn): over the whole prompt, the arguments of earlier tool calls (`{"claim": ...`) read as an ask.
        return bool(r["output_type"] in ("json", "json_object", "json_schema") or r["constrained"]
                    or r["asked"] in ("json", "xml")
                    or (r["shape"] is None and r["guessed"] is None and isinstance(r["prompt_text"], str)
                        and _JSON_WORDS.search(r["prompt_text"]) is not None))

    structured = [r for r in rows if r not in tools and (
        asked(r) or r["shape"] in ("json", "fenced", "xml") or r["parses"] is False)]
    # answers bent by penalties on structured output are gen.penalties' finding (it names the cause)
    penalised = [r for r in structured if r["penalised"]]
    structured = [r for r in structured if not r["penalised"]]
    # What does not parse is harm only where the app was going to parse it: a structured answer (JSON asked for
    # by schema, by a constraint or in words) is the app's to parse, so one that does not parse is blamed as it
    # stands. A cut tool call (an answer the request's tools shaped: structured calls, or a call the backend
    # sent back as its text, `{"name": "cont` under tool_choice required / any) never parses either, but that
    # is the same harm as any cut call: it matters when the app went on with it (sent it back in a later
    # prompt, below), not because its arguments are incomplete. An agent whose next steps are its own (a loop
    # that re-asks one lookup, a fan-out over other records) never read them. A call dispatched without being
    # written back is not seen: the adapters keep no call ids of an answer to match an execute_tool span to,
    # and a tool result sent back comes with the assistant turn that asked for it (its "turn" hash, below).
    # An answer that only looks structured (the model chose to open a brace or a fence; nobody asked for JSON)
    # was not the app's to parse either: a real model does that after tool turns in the history, and cut at the
    # cap it never parses. Like a cut call, it is harm when the app went on with it, not for failing to parse.
    broken = [r for r in structured if r["parses"] is False and asked(r)]
    broken_calls = [r for r in tools if r["parses"] is False and not r["penalised"]]
    unread = [r for r in structured + tools if not r["checked"]]
    # the app went on with a structured answer or tool call that was cut: a later prompt carries it
    continued = [r for r in structured + tools if r["continued"] and not r["checked"]]
    spellings = sorted({str(r["finish_reason_raw"]) for r in rows if r["finish_reason_raw"]})
    ids = sample_ids([r["trace_id"] for r in (tools + structured or rows)])
    outs = [float(r["output_tokens"]) for r in rows if r["output_tokens"] is not None]
    caps = [float(r["max_tokens"]) for r in rows if r["max_tokens"] is not None]
    cap = percentile(caps, 0.5)
    share = n / max(1, total)
    ev = [Evidence("passes that ended on the length cap", n, f"of {total}", ids),
          Evidence("finish reasons as the provider spelt them", ", ".join(spellings[:4]), "", ids)]
    if cap is not None:
        ev.append(Evidence("max_tokens", cap, "tokens", ids, baseline=percentile(outs, 0.5)))
    if structured:
        ev.append(Evidence("structured answers cut (JSON asked for, by schema or in words)", len(structured), "",
                           sample_ids([r["trace_id"] for r in structured])))
    if broken:
        ev.append(Evidence("answers that do not parse", len(broken), "", sample_ids([r["trace_id"] for r in broken])))
    if tools:
        ev.append(Evidence("tool calls cut mid-arguments", len(tools), "", sample_ids([r["trace_id"] for r in tools])))
    if broken_calls:
        ev.append(Evidence("cut tool calls that do not parse (harm only if the app went on with them)",
                           len(broken_calls), "", sample_ids([r["trace_id"] for r in broken_calls])))
    if penalised:
        ev.append(Evidence("cut structured answers generated under repetition penalties (see gen.penalties)",
                           len(penalised), "", sample_ids([r["trace_id"] for r in penalised])))
    if continued:
        ev.append(Evidence("cut answers the app went on with, without checking the stop reason", len(continued), "",
                           sample_ids([r["trace_id"] for r in continued])))
    hurt = len(structured) + len(tools)
    # Blame needs a consequence on record (a structured answer did not parse, or the app carried on with a cut
    # answer or call); a cap that only shortened answers, or cut calls nobody went on with, is reported as info,
    # so a run that is otherwise clean stays quiet.
    harmed = len(broken) + len(continued)
    if hurt and harmed:
        what = ("tool calls" if len(tools) >= len(structured) else "structured answers")
        severity: Severity = "warning"
        title = f"{hurt} {what} were cut at max_tokens ({hurt / max(1, total):.0%} of passes)"
        summary = (f"{n} of {total} passes stopped on the length cap; {hurt} of them were {what} that cannot be "
                   "complete" + (f", {len(broken)} do not parse" if broken else "")
                   + (f", and the app went on after {len(continued)} of them" if continued else "") + ".")
        score = 0.55 + 0.4 * min(1.0, hurt / max(1, total))
        stages: tuple[str, ...] = ("gen.stop", "safety.stop_reason") if unread else ("gen.stop",)
    elif hurt:
        severity, score, stages = "info", 0.3 + 0.1 * share, ("gen.stop", "safety.stop_reason")
        what = ("tool calls" if len(tools) >= len(structured) else "structured answers (JSON asked for)"
                if any(asked(r) for r in structured) else "answers shaped like JSON (none asked for)")
        title = f"{hurt} {what} were cut at max_tokens ({n} of {total} passes hit the cap)"
        summary = ("They cannot be complete; nothing on record shows a consumer failing on them yet (no "
                   "structured answer that fails to parse, no later prompt carrying a cut answer or call), so "
                   "this is reported rather than blamed.")
    else:
        severity, score, stages = "info", 0.1 + 0.1 * share, ("gen.stop",)
        title = f"{n} of {total} answers were cut at max_tokens"
        summary = "Prose answers that hit the cap end mid-sentence; nothing structured was cut."
    return [analyzer.finding(
        "gen.stop", severity, title, summary, ev, ids,
        "Raise max_tokens above the longest answer you expect (or constrain the output to a schema), and treat "
        "finish_reason 'length' (Anthropic 'max_tokens') as a failure before parsing.",
        score, cause=CAUSE, stages=stages, affected_share=share,
        # what the cap wasted: the decode time of answers that cannot be used as they are
        loss_ms=sum(float(r["tpot_ms"] or 0) * float(r["output_tokens"] or 0) for r in structured + tools),
        loss_tokens=sum(float(r["output_tokens"] or 0) for r in structured + tools))]
