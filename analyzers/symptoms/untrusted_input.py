"""Instructions and hidden characters inside text that came from outside the app's own prompt.

Apps that call ``safety.scan`` record ``safety.injection``; most do not. Where the prompt is seen (the
middleware, the collector) each segment that is not the app's own (tool results, earlier turns, the user
turn with what was pasted into it) records how many injection marks it carried: text that addresses the
model ("ignore previous instructions", "reveal the system prompt", "you are now ...") and characters a
person reading it cannot see (``tracer/reading/untrusted_text.py``). No text is needed for that; with full
capture the text also gives the finding an example, and spans recorded before the counts existed are
scanned from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmtrace.analyzers.core.query import Query, attr, sample_ids
from llmtrace.tracer.reading import untrusted_text
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.storage.views import PASS_OPERATIONS

SAMPLE = 2000
_OWN = ("system", "tools", "generation_prompt")
_TOOL_KINDS = ("history:tool", "history:function_call_output")  # Chat Completions, Responses (Anthropic: tool)


@dataclass(frozen=True, slots=True)
class Untrusted:
    passes: int  # passes whose prompt carried outside text with an instruction or hidden characters
    with_orders: int
    hidden_chars: int
    scanned: int  # passes with tool output in the prompt
    trace_ids: tuple[str, ...]
    example: str
    from_tools: bool  # True when a tool result carried it (else another turn: pasted or typed text)
    hit_traces: tuple[str, ...] = ()  # every trace of ``passes`` (trace_ids is a sample of them, for evidence)


def _segments(text: str, segs: list[dict[str, Any]]) -> list[str]:
    out, pos = [], 0
    for s in segs:  # the adapters render "\n".join(f"[{kind}]\n{text}")
        pos += len(f"[{s.get('kind')}]\n")
        n = int(s.get("chars") or 0)
        out.append(text[pos:pos + n])
        pos += n + 1
    return out


def _marks(rec: dict[str, Any], text: str | None) -> tuple[int, int]:
    """(instruction marks, hidden characters) of one segment: as recorded, or scanned from its kept text."""
    if "orders" in rec or "hidden" in rec or text is None:
        return int(rec.get("orders") or 0), int(rec.get("hidden") or 0)
    return untrusted_text.instruction_marks(text), untrusted_text.hidden_chars(text)


def tool_output_findings(q: Query) -> Untrusted | None:
    recent = (f"span_id IN (SELECT client_span_id FROM {q.passes} WHERE client_span_id IS NOT NULL "
              f"ORDER BY start_ns DESC LIMIT {SAMPLE})")
    # One scan: the passes with tool output (counted as scanned) and those that may carry marks (read).
    marked = (f"""(attributes LIKE '%orders%' OR attributes LIKE '%hidden%'
               OR (attributes LIKE '%history:tool%' AND attributes LIKE '%"{N.PROMPT_TEXT}"%'))""")
    found = q.rows(f"""
        SELECT trace_id, start_ns, CASE WHEN attributes LIKE '%history:tool%' THEN 1 ELSE 0 END AS tool,
               CASE WHEN {marked} THEN {attr(N.PROMPT_SEGMENTS)} END AS segs,
               CASE WHEN {marked} THEN {attr(N.PROMPT_TEXT)} END AS text
        FROM {q.spans} WHERE operation IN {PASS_OPERATIONS} AND {recent}
          AND (attributes LIKE '%history:tool%' OR {marked})
        ORDER BY start_ns DESC, trace_id""")
    scanned = sum(int(r["tool"] or 0) for r in found)
    rows = [r for r in found if r["segs"] is not None]
    hit = orders = hidden = 0
    from_tools = False
    ids: list[str] = []
    example = ""
    for r in rows:
        try:
            segs = json.loads(str(r["segs"]))
        except ValueError:
            continue
        if not isinstance(segs, list):
            continue
        texts: list[str | None] = ([*_segments(str(r["text"]), segs)] if r.get("text") is not None
                                   else [None] * len(segs))
        marks = chars = 0
        for rec, text in zip(segs, texts, strict=True):
            kind = str(rec.get("kind"))
            if kind in _OWN:
                continue
            m, h = _marks(rec, text)
            if not kind.startswith(_TOOL_KINDS) and not m:
                h = 0  # hidden characters a user typed or pasted are intake.normalization's, not an injection
            if m or h:
                from_tools = from_tools or kind.startswith(_TOOL_KINDS)
                if text is not None and m and not example:
                    example = untrusted_text.first_mark(text)
            marks, chars = marks + m, chars + h
        if marks or chars:
            hit += 1
            hidden += chars
            orders += marks > 0
            ids.append(str(r["trace_id"]))
    if not hit:
        return None
    return Untrusted(hit, orders, hidden, max(scanned, hit), sample_ids(ids), example, from_tools,
                     tuple(dict.fromkeys(ids)))
