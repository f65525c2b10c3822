"""What a foreign span's input messages show about the conversation, as the client middleware reads it off
the messages array an app sends (adapters/middleware/wire.py): the tool calls the history repeats (``loop.budget``
with ``llmtrace.loop.observed=wire``) and the invisible characters and non-breaking spaces the prompt holds
(``intake.normalization``). Only counts are recorded, never text, so this runs under every capture mode but
``none``; a span with no input messages (content capture off) gives nothing.

Tool calls are read from each shape the installed packages write: OTel GenAI ``gen_ai.input.messages``
parts of type ``tool_call`` (openai-v2, OpenLLMetry), OpenAI-style ``tool_calls`` on a message (LiteLLM),
OpenInference's ``llm.input_messages.N.message.tool_calls.M.tool_call.function.{name,arguments}`` and the
older ``gen_ai.prompt.N.tool_calls.M.{name,arguments}``; the tool results beside them (``tool_call_response``
parts, ``tool`` messages by their ``tool_call_id``). Arguments and results are compared in their loose form
(tracer/reading/tool_digest.py), so a call re-sent with its keys in another order, other whitespace or its id in
other case is the same call, and the same result or error after the model saw it is a call that made no
progress, whatever it asked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from llmtrace.tracer.collect.otlp_segments import messages
from llmtrace.tracer.reading import tool_digest
from llmtrace.tracer.reading.untrusted_text import hidden_chars, nbsp_chars
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

_OI_CALL = re.compile(r"^llm\.input_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)$")
_PROMPT_CALL = re.compile(r"^gen_ai\.prompt\.(\d+)\.tool_calls\.(\d+)\.(id|name|arguments)$")
_OI_MESSAGE = re.compile(r"^llm\.input_messages\.(\d+)\.message\.(role|content|tool_call_id)$")
_PROMPT_MESSAGE = re.compile(r"^gen_ai\.prompt\.(\d+)\.(role|content|tool_call_id)$")

_Call = tuple[str, str, object]  # (call id, tool name, arguments as recorded)
_Step = list[_Call]


def _parts_text(parts: object) -> object:
    """A message's content as the tool gave it: LiteLLM writes a tool message's text as ``parts``."""
    if isinstance(parts, list):
        texts = [p.get("content") for p in parts if isinstance(p, Mapping) and p.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)  # type: ignore[arg-type]
    return parts


def _message_tools(m: Mapping[str, object], results: dict[str, object]) -> _Step:
    """One recorded message's tool calls; the tool results it carries go into ``results`` (call id -> content)."""
    out: _Step = []
    parts = m.get("parts")
    if isinstance(parts, list):
        for p in parts:
            if isinstance(p, Mapping) and p.get("type") == "tool_call":
                out.append((str(p.get("id") or ""), str(p.get("name", "")), p.get("arguments")))
            elif isinstance(p, Mapping) and p.get("type") == "tool_call_response" and p.get("id"):
                results[str(p["id"])] = p.get("response")
    if m.get("role") == "tool" and m.get("tool_call_id"):  # OpenAI-style (LiteLLM)
        results[str(m["tool_call_id"])] = m.get("content") if "content" in m else _parts_text(parts)
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        for c in calls:
            if not isinstance(c, Mapping):
                continue
            fn = c.get("function")
            fn = fn if isinstance(fn, Mapping) else c
            out.append((str(c.get("id") or ""), str(fn.get("name", "")), fn.get("arguments")))
    return out


def _indexed(attrs: Mapping[str, object], results: dict[str, object]) -> list[_Step]:
    """The same from OpenInference's and the older ``gen_ai.prompt`` flattened keys."""
    calls: dict[int, dict[int, dict[str, object]]] = {}
    msgs: dict[int, dict[str, object]] = {}
    for key, value in attrs.items():
        if m := _OI_CALL.match(key) or _PROMPT_CALL.match(key):
            field = m.group(3).removeprefix("function.")
            calls.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), {})[field] = value
        elif m := _OI_MESSAGE.match(key) or _PROMPT_MESSAGE.match(key):
            msgs.setdefault(int(m.group(1)), {})[m.group(2)] = value
    for msg in msgs.values():
        if msg.get("role") == "tool" and msg.get("tool_call_id"):
            results[str(msg["tool_call_id"])] = msg.get("content")
    return [[(str(c.get("id") or ""), str(c.get("name", "")), c.get("arguments")) for _, c in sorted(step.items())]
            for _, step in sorted(calls.items())]


def tool_history(attrs: Mapping[str, object]) -> tuple[list[_Step], dict[str, object]]:
    """The tool calls of each input message that asked for some, and the results the history holds (call id ->
    content as recorded)."""
    results: dict[str, object] = {}
    raw = attrs.get("gen_ai.input.messages")
    if isinstance(raw, str) and raw[:1] == "[":
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if isinstance(raw, list):
        steps = [_message_tools(m, results) for m in raw if isinstance(m, Mapping)]
        return [s for s in steps if s], results
    return _indexed(attrs, results), results


def _repeats(attrs: Mapping[str, object]) -> tuple[int, tool_digest.Repeats]:
    """(steps, repeats) of the history: the same count the middleware makes off the messages array it sends."""
    steps, results = tool_history(attrs)
    asked = {cid: args for step in steps for cid, _, args in step if cid}
    keyed = [[(cid, name, tool_digest.loose_key(args)) for cid, name, args in step] for step in steps]
    keys = {cid: tool_digest.result_key(content, None, asked.get(cid)) for cid, content in results.items()}
    return len(steps), tool_digest.count_repeats(keyed, keys)


def conversation_rows(attrs: Mapping[str, object], mode: str) -> list[tuple[str, dict[str, object]]]:
    """(stage id, values) rows for a chat span: loop.budget when the history holds tool calls,
    intake.normalization when the span recorded its input messages."""
    if mode == "none":
        return []
    rows: list[tuple[str, dict[str, object]]] = []
    steps, repeats = _repeats(attrs)
    if steps:
        rows.append((S.LOOP_BUDGET, {N.BUDGET_STEPS: steps, N.LOOP_REPEATED_TOOL_CALLS: repeats.calls,
                                     N.LOOP_REPEATED_TOOL_RESULTS: repeats.results,
                                     N.BUDGET_LOOP_DETECTED: repeats.calls > 0, N.LOOP_OBSERVED: "wire"}))
    texts = [text for _, text in messages(attrs) if text]
    if texts:
        rows.append((S.INTAKE_NORMALIZATION, {
            # (the app's own counts, tracer/reading/textscan.py: a joiner that is a word's spelling is not hidden)
            N.NORMALIZATION_INVISIBLE_CHARS: sum(hidden_chars(t) for t in texts),
            N.NORMALIZATION_NBSP: sum(nbsp_chars(t) for t in texts)}))
    return rows
