"""Prompt segments (system, each history turn, user) from the messages other instrumentations record, in
the shape llmtrace's own pass spans carry (``llmtrace.prompt.segments``: kind, keyed hash, chars and a
hash chain over 64-character chunks), so the cache analysis can say where two foreign prompts part.

Read, in this order: OTel GenAI ``gen_ai.system_instructions`` + ``gen_ai.input.messages`` (parts with
``content``, as openai-v2, OpenLLMetry and LiteLLM write them), OpenInference ``llm.input_messages.N.*``,
the older ``gen_ai.prompt.N.role/content``. Tool definitions come first (the order templates render them):
``gen_ai.tool.definitions``, OpenLLMetry's ``llm.request.functions.N.*``, OpenInference's ``llm.tools.N.*``.
The records are ``prompt_segments``' own, as the client middleware writes them.

The collector sees each prompt alone, and with ``hashes`` a 64-character hash chain says only to a chunk
where two prompts part. So each record also lists the values in it that look volatile (timestamps, uuids,
hex and base64 ids, e-mails, epochs, customer ids: their class, offset and length, never their text) with
keyed hashes of the text before and after each: when both match an earlier prompt's, that value is the only
difference, and the cache analysis can name it, give its exact offset and count what follows as shared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from xml.etree import ElementTree

from llmtrace.tracer.reading import evidence_shape
from llmtrace.tracer.reading.prompt_segments import canonical as _canonical
from llmtrace.tracer.reading.prompt_segments import prompt_attributes
from llmtrace.tracer.registry import names as N

_SYSTEM_ROLES = ("system", "developer")
_INDEXED = re.compile(r"^(?:llm\.input_messages|gen_ai\.prompt)\.(\d+)\.(?:message\.)?(role|content)$")
_TOOLS_INDEXED = re.compile(r"^(?:llm\.request\.functions|llm\.tools)\.(\d+)\.(.+)$")


def _text(content: object) -> str:
    """A message's text: a string, or parts (``{"type": "text", "content"|"text": ...}``) joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, Mapping):
                t = part.get("content", part.get("text")) if part.get("type") in ("text", None) else None
                pieces.append(t if isinstance(t, str) else _canonical(part))
            elif isinstance(part, str):
                pieces.append(part)
        return "\n".join(pieces)
    return _canonical(content)


def _json(value: object) -> object:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def tools(attrs: Mapping[str, object]) -> str | None:
    """The tool definitions as one canonical text, or None."""
    defs = _json(attrs.get("gen_ai.tool.definitions"))
    if isinstance(defs, list) and defs:
        return _canonical(defs)
    indexed: dict[int, dict[str, object]] = {}
    for key, value in attrs.items():
        m = _TOOLS_INDEXED.match(key)
        if m:
            indexed.setdefault(int(m.group(1)), {})[m.group(2)] = _json(value)
    return _canonical([d for _, d in sorted(indexed.items())]) if indexed else None


def messages(attrs: Mapping[str, object]) -> list[tuple[str, str]]:
    """(role, text) of each input message, from whichever shape the span has; [] when none."""
    out: list[tuple[str, str]] = []
    system = _json(attrs.get("gen_ai.system_instructions"))
    if system:
        out.append(("system", _text(system)))
    msgs = _json(attrs.get("gen_ai.input.messages"))
    if isinstance(msgs, list) and msgs:
        for m in msgs:
            if isinstance(m, Mapping):
                out.append((str(m.get("role", "unknown")), _text(m.get("parts", m.get("content")))))
        return out
    indexed: dict[int, dict[str, str]] = {}
    for key, value in attrs.items():
        m = _INDEXED.match(key)
        if m and isinstance(value, str):
            indexed.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out += [(d.get("role", "unknown"), d.get("content", "")) for _, d in sorted(indexed.items())]
    return out


_OUT_TOOL_KEY = re.compile(r"^(?:gen_ai\.completion|llm\.output_messages)\.0\.(?:message\.)?tool_calls\.")
_FENCE = re.compile(r"```([\w+-]*)[ \t]*\n(.*?)(\n[ \t]*```[ \t]*)?\s*$", re.DOTALL)
_XML_START = re.compile(r"<[A-Za-z?!]")
_MAX_PARSE_CHARS = 1 << 20


def _output(attrs: Mapping[str, object]) -> tuple[str | None, bool]:
    """The answer's text (None when not captured) and whether it holds a tool call."""
    msgs = _json(attrs.get("gen_ai.output.messages"))
    if isinstance(msgs, list) and msgs and isinstance(msgs[0], Mapping):
        parts = msgs[0].get("parts")
        parts = parts if isinstance(parts, list) else []
        tool = any(isinstance(x, Mapping) and x.get("type") == "tool_call" for x in parts)
        text = _text([x for x in parts if isinstance(x, Mapping) and x.get("type") == "text"])
        return text, tool
    tool = any(_OUT_TOOL_KEY.match(k) for k in attrs)
    for key in ("gen_ai.completion.0.content", "llm.output_messages.0.message.content"):
        v = attrs.get(key)
        if isinstance(v, str):
            return v, tool
    return None, tool


# Keys of a response that differ on every call whatever the answer was: its id, when it was made, the
# fingerprint of the backend, the usage (cached tokens move between identical calls) and the tool-call ids.
_ENVELOPE = frozenset({"id", "created", "created_at", "system_fingerprint", "usage", "service_tier", "call_id",
                       "tool_call_id", "completed_at"})
_OUT_INDEXED = re.compile(r"^(?:llm\.output_messages|gen_ai\.completion)\.\d+\.")


def _bare(value: object) -> object:
    """``value`` without the envelope keys, at any depth."""
    if isinstance(value, Mapping):
        return {str(k): _bare(v) for k, v in value.items() if k not in _ENVELOPE}
    if isinstance(value, list):
        return [_bare(v) for v in value]
    return value


def answer_text(attrs: Mapping[str, object]) -> str | None:
    """The answer itself (each choice's text and tool calls) as one canonical text, for the output hash; None
    when no answer was captured. Not the response body around it: OpenInference's ``output.value`` is the
    whole response, whose id and creation time are new on every call, so two identical answers hashed apart
    and one prompt asked twice at temperature 0 read as "same prompt, different answer"."""
    msgs = _json(attrs.get("gen_ai.output.messages"))
    if isinstance(msgs, list) and msgs:
        return _canonical(_bare(msgs))
    indexed = sorted((k, v) for k, v in attrs.items() if _OUT_INDEXED.match(k)
                     and k.rsplit(".", 1)[-1] not in _ENVELOPE and isinstance(v, str | int | float | bool))
    if indexed:
        return _canonical(indexed)
    body = _json(attrs.get("output.value"))
    if isinstance(body, Mapping):
        return _canonical(_bare(body))
    return None


def _parses(kind: str, text: str) -> bool:
    try:
        if kind == "json":
            json.loads(text)
        else:  # expat refuses entity-expansion bombs itself
            ElementTree.fromstring(text)
    except (ValueError, ElementTree.ParseError):
        return False
    return True


def output_shape(text: str) -> tuple[str, bool | None]:
    """(shape, parses) of an answer, as the client middleware records them: json, fenced, xml or text."""
    s = text.strip()
    if not s or len(s) > _MAX_PARSE_CHARS:
        return "text", None
    if s[0] in "{[":
        return "json", _parses("json", s)
    if s.startswith("```"):
        m = _FENCE.match(s)
        if m is None or m.group(3) is None:
            return "fenced", False  # the closing fence never came: cut
        inner, lang = m.group(2).strip(), m.group(1).lower()
        if lang == "json" or inner[:1] in ("{", "["):
            return "fenced", _parses("json", inner)
        return "fenced", _parses("xml", inner) if lang == "xml" or _XML_START.match(inner) else True
    if _XML_START.match(s):
        return "xml", _parses("xml", s)
    return "text", None


def output_attributes(attrs: Mapping[str, object]) -> dict[str, object]:
    """What the answer looked like (shape, whether it parses, a tool call), from the text the instrumentation
    captured: computed here, the text itself follows the capture mode like every other."""
    text, tool = _output(attrs)
    out: dict[str, object] = {N.GEN_AI_OUTPUT_TYPE: "tool_calls"} if tool else {}
    if text is not None:
        shape, parses = output_shape(text)
        out.update({N.OUTPUT_SHAPE: shape, N.OUTPUT_PARSES: parses})
    return out


# a prompt that asks for a format in words ("return only a JSON object"): an answer cut at max_tokens cannot
# be what the app parses, though no response_format says so (the middleware's rule, adapters/middleware/wire.py)
_ASKS = (("json", re.compile(r"\bjson\b", re.I)), ("xml", re.compile(r"\bxml\b", re.I)))
_ASK_SCAN_CHARS = 64 * 1024


def _asked_in_words(msgs: list[tuple[str, str]], attrs: Mapping[str, object]) -> dict[str, object]:
    """``llmtrace.output.asked_in_words`` (json / xml) when the system prompt or the last user turn names the
    format and the span says of no output type; a word, never the text, so under every capture mode."""
    if N.GEN_AI_OUTPUT_TYPE in attrs:
        return {}
    last_user = max((i for i, (role, _) in enumerate(msgs) if role == "user"), default=-1)
    for i, (role, text) in enumerate(msgs):
        if role in _SYSTEM_ROLES or i == last_user:
            for fmt, pat in _ASKS:
                if pat.search(text[:_ASK_SCAN_CHARS]):
                    return {N.OUTPUT_ASKED_IN_WORDS: fmt}
    return {}


def segment_attributes(attrs: Mapping[str, object], mode: str) -> dict[str, object]:
    """``llmtrace.prompt.segments`` / ``llmtrace.prompt.hash`` (and the text under ``full``), the format the
    prompt asked for in words, or {}."""
    msgs = messages(attrs)
    if not msgs:
        return {}
    asked = _asked_in_words(msgs, attrs)
    if mode == "none":
        return asked
    last_user = max((i for i, (role, _) in enumerate(msgs) if role == "user"), default=-1)
    segments = [("system" if role in _SYSTEM_ROLES else "user" if i == last_user else f"history:{role}", text)
                for i, (role, text) in enumerate(msgs)]
    tool_text = tools(attrs)
    if tool_text is not None:
        segments.insert(0, ("tools", tool_text))
    return {**prompt_attributes(segments, mode), **asked}  # with each segment's volatile-looking values


def evidence_values(attrs: Mapping[str, object], mode: str) -> dict[str, object]:
    """The ``intake.evidence_formatting`` values of retrieved passages pasted into the prompt (their count,
    labels, delimiters and duplicates, never their text: tracer/reading/evidence_shape.py, the middleware's
    rule), or {}. The assistant's own earlier turns are not evidence; tool results and pasted text are."""
    if mode == "none":
        return {}
    msgs = messages(attrs)
    last_user = max((i for i, (role, _) in enumerate(msgs) if role == "user"), default=-1)
    # each text with its place, named as the prompt's segments are: a fixed block in the system prompt is
    # the app's own reference text (analyzers/symptoms/wrong_source.py)
    found = evidence_shape.read([("system" if role in _SYSTEM_ROLES else "user" if i == last_user else f"history:{role}",
                                  text) for i, (role, text) in enumerate(msgs) if role != "assistant"])
    return {} if found is None else evidence_shape.values(*found)
