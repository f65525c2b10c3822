"""Render a model's chat template (jinja2, as stored in ``tokenizer.chat_template``) into a prompt string.

The environment mirrors what Hugging Face templates expect (``raise_exception``, ``tojson`` without ASCII
escaping, ``strftime_now``, loop controls, trimmed blocks), inside jinja2's sandbox because a template
comes from a model file, not from us.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# ChatML: used when a model file carries no template (and by the tiny random test model).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """The template refused the messages (its own ``raise_exception``) or failed to render."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template does not compile: {exc}") from exc


def render_chat_template(
    template: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    bos_token: str = "",
    eos_token: str = "",
    **extra: Any,
) -> str:
    """Render ``messages`` (OpenAI-style dicts with ``role`` and ``content``) through ``template``."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError("messages must be a list of dicts, each with a 'role'")
    normalized = [_normalize_message(m) for m in messages]
    if tools and "tools" not in template:
        normalized = _tools_in_system_turn(normalized, tools)
    if "tool_calls" not in template:
        normalized = [_tool_calls_as_content(m) for m in normalized]
    try:
        return _compile(template).render(
            messages=normalized,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            bos_token=bos_token,
            eos_token=eos_token,
            **extra,
        )
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template failed to render: {exc}") from exc


def _normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """Flatten OpenAI content parts (``[{"type": "text", "text": ...}]``) to a string; None becomes ""."""
    content = message.get("content")
    if content is None:
        content = ""
    elif isinstance(content, list):
        content = "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    if content == message.get("content"):
        return message
    return {**message, "content": content}


def _tools_in_system_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A template that knows nothing of tools still has to show them: describe them in the system turn."""
    from llmtrace.backend.generation.tool_calls import describe_tools

    text = describe_tools(tools)
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _tool_calls_as_content(message: dict[str, Any]) -> dict[str, Any]:
    """Earlier assistant tool calls, written back in the JSON shape the model was constrained to."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls or message.get("content"):
        return message
    from llmtrace.backend.generation.tool_calls import tool_call_message_content

    return {**message, "content": tool_call_message_content(calls)}
