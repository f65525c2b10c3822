"""Prompt segments (system, each history turn, user) from the messages other instrumentations record, in
the shape llmtrace's own pass spans carry (``llmtrace.prompt.segments``: kind, keyed hash, chars and a
hash chain over 64-character chunks), so the cache analysis can say where two foreign prompts part.

Read, in this order: OTel GenAI ``gen_ai.system_instructions`` + ``gen_ai.input.messages`` (parts with
``content``, as openai-v2, OpenLLMetry and LiteLLM write them), OpenInference ``llm.input_messages.N.*``,
the older ``gen_ai.prompt.N.role/content``. The records are ``prompt_segments``' own, as the client
middleware writes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from llmtrace.tracer.record.prompt_segments import canonical as _canonical
from llmtrace.tracer.record.prompt_segments import prompt_attributes

_SYSTEM_ROLES = ("system", "developer")
_INDEXED = re.compile(r"^(?:llm\.input_messages|gen_ai\.prompt)\.(\d+)\.(?:message\.)?(role|content)$")


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


def segment_attributes(attrs: Mapping[str, object], mode: str) -> dict[str, object]:
    """``llmtrace.prompt.segments`` / ``llmtrace.prompt.hash`` (and the text under ``full``), or {}."""
    msgs = messages(attrs)
    if mode == "none" or not msgs:
        return {}
    last_user = max((i for i, (role, _) in enumerate(msgs) if role == "user"), default=-1)
    segments = [("system" if role in _SYSTEM_ROLES else "user" if i == last_user else f"history:{role}", text)
                for i, (role, text) in enumerate(msgs)]
    return prompt_attributes(segments, mode)
