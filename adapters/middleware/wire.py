"""Boundary values read off the wire alone, for the stages the app-side helpers would otherwise be needed for.

Each function takes what one finished call showed and returns the values for one stage span; the caller
(``client_stages``) records them. Nothing here keeps text: prompts are compared in memory
(``divergence``) and only classes, offsets and counts come back.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING
from xml.etree import ElementTree

from llmtrace.tracer import capture
from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading import divergence, sessions
from llmtrace.tracer.reading.memory import memory
from llmtrace.tracer.reading.tokens import approx_tokens
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

if TYPE_CHECKING:
    from llmtrace.adapters.middleware.call_record import CallRecord


def _tokens(chars: int, ratio: float | None) -> int:
    return round(chars * ratio) if ratio is not None else approx_tokens(chars)


def prefix_values(call: CallRecord) -> dict[str, object]:
    """``cache.prefix_match`` values from comparing this prompt with the last ones of its template."""
    obs = call.obs
    if not obs.segments or capture.mode() == "none":
        return {}
    key = divergence.template_key(call.operation, obs.model, obs.segments)
    total_chars = sum(len(t) for _, t in obs.segments)
    est = approx_tokens(total_chars)
    ratio: float | None = None
    tok = call.opts.tokenizer
    if tok is not None and total_chars:
        try:
            est = sum(int(tok(t)) for _, t in obs.segments)
            ratio = est / total_chars
        except Exception:  # the app's tokenizer failing costs only the refinement
            ratio = None
    values: dict[str, object] = {
        N.DIVERGENCE_TEMPLATE: capture.hash_text(key),
        N.DIVERGENCE_PROMPT_TOKENS_EST: est,
    }
    d = memory.prompts.observe(key, obs.segments)
    if d is not None:
        values.update(
            {
                N.DIVERGENCE_SEGMENT: d.segment,
                N.DIVERGENCE_CHAR_OFFSET: d.char_offset,
                N.DIVERGENCE_SEGMENT_OFFSET: d.segment_offset,
                N.DIVERGENCE_TOKEN_OFFSET: _tokens(d.char_offset, ratio),
                N.DIVERGENCE_LENGTH: d.length,
                N.DIVERGENCE_CLASS: d.klass,
                N.DIVERGENCE_SHARED_PREFIX_TOKENS: _tokens(d.shared_prefix_chars, ratio),
                N.DIVERGENCE_REUSABLE_AFTER_TOKENS: _tokens(d.reusable_after_chars, ratio),
            }
        )
    return values


# ── output shape ─────────────────────────────────────────────────────────────────────────────
_FENCE = re.compile(r"```([\w+-]*)[ \t]*\n(.*?)(\n[ \t]*```[ \t]*)?\s*$", re.DOTALL)
_XML_START = re.compile(r"<[A-Za-z?!]")
_MAX_PARSE_CHARS = 4 * 1024 * 1024


def _parses_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _parses_xml(text: str) -> bool:
    try:
        # expat (2.4+, as bundled with CPython 3.11) refuses entity-expansion bombs itself.
        ElementTree.fromstring(text)
    except (ElementTree.ParseError, ValueError):
        return False
    return True


def output_shape(text: str) -> tuple[str, bool | None]:
    """(shape, parses) of an answer: json, fenced, xml or text; ``parses`` is None for text."""
    s = text.strip()
    if not s:
        return "text", None
    parses: bool | None
    if s[0] in "{[":
        return "json", _parses_json(s) if len(s) <= _MAX_PARSE_CHARS else None
    if s.startswith("```"):
        m = _FENCE.match(s) if len(s) <= _MAX_PARSE_CHARS else None
        if m is None or m.group(3) is None:
            return "fenced", False  # the closing fence never came: cut
        inner = m.group(2).strip()
        lang = m.group(1).lower()
        if lang == "json" or inner[:1] in ("{", "["):
            parses = _parses_json(inner)
        elif lang == "xml" or _XML_START.match(inner):
            parses = _parses_xml(inner)
        else:
            parses = True
        return "fenced", parses
    if _XML_START.match(s):
        return "xml", _parses_xml(s) if len(s) <= _MAX_PARSE_CHARS else None
    return "text", None


# a prompt that asks for a format in words ("reply only with a JSON object", "as XML"): a cut answer then
# cannot be what the app parses, though no response_format says so
_ASKS = (("json", re.compile(r"\bjson\b", re.I)), ("xml", re.compile(r"\bxml\b", re.I)))
_ASK_SCAN_CHARS = 64 * 1024  # the asking sentence sits in the system prompt or the last user turn


def asked_in_words(segments: list[tuple[str, str]]) -> str | None:
    """json or xml when the system prompt or the last user turn names the format, else None."""
    for kind, text in segments:
        if kind in ("system", "user"):
            head = text[:_ASK_SCAN_CHARS]
            for fmt, pat in _ASKS:
                if pat.search(head):
                    return fmt
    return None


def output_values(output_type: str | None, text: str | None,
                  segments: list[tuple[str, str]] | None = None) -> dict[str, object]:
    """Output-shape values for ``gen.stop`` (and the pass span): computed from the answer in memory, and,
    with no response_format, the format the prompt asked for in words."""
    asked = asked_in_words(segments) if output_type is None and segments else None
    if text is None:
        return {N.OUTPUT_ASKED_IN_WORDS: asked} if asked else {}
    shape, parses = output_shape(text)
    values: dict[str, object] = {N.OUTPUT_SHAPE: shape, N.OUTPUT_PARSES: parses}
    if asked:
        values[N.OUTPUT_ASKED_IN_WORDS] = asked
    if output_type is not None:
        values[N.GEN_AI_OUTPUT_TYPE] = output_type
    else:  # nothing was asked for: say whether the answer looks structured anyway
        values[N.OUTPUT_STRUCTURED_GUESS] = shape != "text"
    return values


# ── conversations: tool round trips, repeated tool calls, rewritten history ─────────────────
def conversation_stages(call: CallRecord, end_wall: int) -> None:
    """Remember the call in its conversation; record what its messages array showed."""
    view = call.view
    if view is None:
        return
    obs, span, t0w = call.obs, call.pass_span, call.t0_wall
    prompt_chars = sum(len(t) for _, t in obs.segments)
    memory.conversations.end(view, span, obs.response_id, end_wall, prompt_chars)
    if view.parent is not None:
        # The tools ran between the call that asked for them and this one: one span each, from the wire.
        for name, call_id, chars in view.tool_results:
            rec.record_stage(
                S.LOOP_TOOL_DISPATCH,
                start_ns=min(view.since_ns or t0w, t0w),
                end_ns=t0w,
                parent=view.parent,
                values={
                    N.GEN_AI_OPERATION_NAME: "execute_tool",
                    N.GEN_AI_TOOL_NAME: name,
                    N.GEN_AI_TOOL_CALL_ID: call_id or None,
                    N.TOOL_RESULT_TOKENS: approx_tokens(chars),
                    N.TOOL_OBSERVED: "wire",
                },
            )
    if view.tool_calls:
        rec.record_stage(
            S.LOOP_BUDGET,
            start_ns=t0w,
            end_ns=t0w,
            parent=span,
            values={
                N.BUDGET_STEPS: view.tool_call_steps,
                N.LOOP_REPEATED_TOOL_CALLS: view.repeated_tool_calls,
                N.LOOP_REPEATED_TOOL_RESULTS: view.repeated_tool_results,
                N.BUDGET_LOOP_DETECTED: view.repeated_tool_calls > 0,
                N.LOOP_OBSERVED: "wire",
            },
        )
    if view.rewritten:
        rec.record_stage(
            S.LOOP_COMPACTION,
            start_ns=t0w,
            end_ns=t0w,
            parent=span,
            values=sessions.compaction_values(view, prompt_chars),
        )
