"""What a foreign span's input messages show about the conversation, as the client middleware reads it off
the messages array an app sends (adapters/middleware/wire.py): the tool calls the history repeats (``loop.budget``
with ``llmtrace.loop.observed=wire``) and the invisible characters and non-breaking spaces the prompt holds
(``intake.normalization``). Only counts are recorded, never text, so this runs under every capture mode but
``none``; a span with no input messages (content capture off) gives nothing.

Tool calls are read from each shape the installed packages write: OTel GenAI ``gen_ai.input.messages``
parts of type ``tool_call`` (openai-v2, OpenLLMetry), OpenAI-style ``tool_calls`` on a message (LiteLLM),
OpenInference's ``llm.input_messages.N.message.tool_calls.M.tool_call.function.{name,arguments}`` and the
older ``gen_ai.prompt.N.tool_calls.M.{name,arguments}``. Arguments are compared as canonical JSON, so a
call re-sent with its keys in another order or other whitespace is the same call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from llmtrace.tracer.collect.otlp_segments import messages
from llmtrace.tracer.reading.untrusted_text import hidden_chars, nbsp_chars
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

_OI_CALL = re.compile(r"^llm\.input_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.function\.(name|arguments)$")
_PROMPT_CALL = re.compile(r"^gen_ai\.prompt\.(\d+)\.tool_calls\.(\d+)\.(name|arguments)$")


def _canonical_args(value: object) -> str:
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            return text.strip()
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)


def _message_calls(m: Mapping[str, object]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    parts = m.get("parts")
    if isinstance(parts, list):
        for p in parts:
            if isinstance(p, Mapping) and p.get("type") == "tool_call":
                out.append((str(p.get("name", "")), _canonical_args(p.get("arguments"))))
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        for c in calls:
            if not isinstance(c, Mapping):
                continue
            fn = c.get("function")
            fn = fn if isinstance(fn, Mapping) else c
            out.append((str(fn.get("name", "")), _canonical_args(fn.get("arguments"))))
    return out


def tool_calls(attrs: Mapping[str, object]) -> list[list[tuple[str, str]]]:
    """The (name, canonical arguments) of the tool calls in each input message that asked for some."""
    raw = attrs.get("gen_ai.input.messages")
    if isinstance(raw, str) and raw[:1] == "[":
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if isinstance(raw, list):
        steps = [_message_calls(m) for m in raw if isinstance(m, Mapping)]
        return [s for s in steps if s]
    indexed: dict[int, dict[int, dict[str, object]]] = {}
    for key, value in attrs.items():
        if not key.endswith(("name", "arguments")):
            continue
        m = _OI_CALL.match(key) or _PROMPT_CALL.match(key)
        if m:
            indexed.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), {})[m.group(3)] = value
    return [[(str(c.get("name", "")), _canonical_args(c.get("arguments"))) for _, c in sorted(calls.items())]
            for _, calls in sorted(indexed.items())]


def conversation_rows(attrs: Mapping[str, object], mode: str) -> list[tuple[str, dict[str, object]]]:
    """(stage id, values) rows for a chat span: loop.budget when the history holds tool calls,
    intake.normalization when the span recorded its input messages."""
    if mode == "none":
        return []
    rows: list[tuple[str, dict[str, object]]] = []
    steps = tool_calls(attrs)
    if steps:
        seen: dict[tuple[str, str], int] = {}
        for step in steps:
            for call in step:
                seen[call] = seen.get(call, 0) + 1
        repeats = sum(n - 1 for n in seen.values())
        rows.append((S.LOOP_BUDGET, {N.BUDGET_STEPS: len(steps), N.LOOP_REPEATED_TOOL_CALLS: repeats,
                                     N.BUDGET_LOOP_DETECTED: repeats > 0, N.LOOP_OBSERVED: "wire"}))
    texts = [text for _, text in messages(attrs) if text]
    if texts:
        rows.append((S.INTAKE_NORMALIZATION, {
            # (the app's own counts, tracer/reading/textscan.py: a joiner that is a word's spelling is not hidden)
            N.NORMALIZATION_INVISIBLE_CHARS: sum(hidden_chars(t) for t in texts),
            N.NORMALIZATION_NBSP: sum(nbsp_chars(t) for t in texts)}))
    return rows
