"""Instructions and hidden characters inside tool output, read off the prompts themselves.

Apps that call ``safety.scan`` record ``safety.injection``; most do not. With full capture the client pass
span keeps each segment's text, so tool results (``history:tool`` segments: what a tool returned and the
app pasted into the next prompt) can be checked for the two marks of an injection: text that addresses
the model ("ignore previous instructions", "reveal the system prompt", "you are now ...") and characters a
person reading the tool's output cannot see.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from llmtrace.analyzers.query import Query, attr, sample_ids
from llmtrace.tracer.storage.views import PASS_OPERATIONS

SAMPLE = 2000
_HIDDEN = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f]")
_ORDERS = re.compile(
    r"\b(ignore|disregard|forget)\b[^.\n]{0,40}\b(instructions?|rules|prompt)\b"
    r"|\breveal\b[^.\n]{0,30}\b(system prompt|instructions|password|secret)"
    r"|\byou are now\b|\bnew instructions?\s*:|\bdo not tell the user\b", re.I)


@dataclass(frozen=True, slots=True)
class Untrusted:
    passes: int  # passes whose prompt carried tool output with an instruction or hidden characters
    with_orders: int
    hidden_chars: int
    scanned: int  # passes with tool output in the prompt
    trace_ids: tuple[str, ...]
    example: str


def _segments(text: str, segs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out, pos = [], 0
    for s in segs:  # the adapters render "\n".join(f"[{kind}]\n{text}")
        pos += len(f"[{s.get('kind')}]\n")
        n = int(s.get("chars") or 0)
        out.append((str(s.get("kind")), text[pos:pos + n]))
        pos += n + 1
    return out


def tool_output_findings(q: Query) -> Untrusted | None:
    rows = q.rows(f"""
        SELECT trace_id, {attr('llmtrace.prompt.segments')} AS segs, {attr('llmtrace.prompt.text')} AS text
        FROM {q.spans} WHERE operation IN {PASS_OPERATIONS}
          AND span_id IN (SELECT client_span_id FROM {q.passes} WHERE client_span_id IS NOT NULL
                          ORDER BY start_ns DESC LIMIT {SAMPLE})
          AND attributes LIKE '%history:tool%' AND attributes LIKE '%"llmtrace.prompt.text"%'""")
    scanned = hit = orders = hidden = 0
    ids: list[str] = []
    example = ""
    for r in rows:
        try:
            segs = json.loads(str(r["segs"]))
        except ValueError:
            continue
        tools = [t for k, t in _segments(str(r["text"]), segs) if k.startswith("history:tool")]
        if not tools:
            continue
        scanned += 1
        text = "\n".join(tools)
        h = len(_HIDDEN.findall(text))
        m = _ORDERS.search(_HIDDEN.sub("", text))
        if h or m:
            hit += 1
            hidden += h
            orders += m is not None
            ids.append(str(r["trace_id"]))
            if m is not None and not example:
                example = m.group(0)[:60]
    if not hit:
        return None
    return Untrusted(hit, orders, hidden, scanned, sample_ids(ids), example)
