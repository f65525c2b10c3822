"""Tool calls for the chat API through constrained JSON.

The model is shown the tools (in the system prompt when its chat template has no tool support) and, when it
is to call one, it writes ``{"name": <one of the tools>, "arguments": {...per that tool's schema...}}``;
the constraint makes that shape certain and ``parse_tool_calls`` turns it into OpenAI ``tool_calls``.

``tool_choice``: "none" (no constraint), "auto" (either plain text or a call: a reply that starts with ``{``
is a call), "required" (a call to any tool), or ``{"type": "function", "function": {"name": ...}}``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from llmtrace.backend.generation.constraint import lark_json
from llmtrace.backend.generation.params import Constraint, InvalidRequestError


def _functions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not isinstance(tools, list) or not tools:
        raise InvalidRequestError("tools must be a non-empty list", "tools")
    out = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequestError("each tool needs {'type': 'function', 'function': {'name': ...}}", "tools")
        out.append(fn)
    return out


def _call_schema(fn: dict[str, Any]) -> dict[str, Any]:
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "object",
        "properties": {"name": {"const": fn["name"]}, "arguments": params},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_call_schema(tools: list[dict[str, Any]], name: str | None = None) -> dict[str, Any]:
    """JSON schema of one call to any of ``tools`` (or to the one named)."""
    fns = _functions(tools)
    if name is not None:
        fns = [f for f in fns if f["name"] == name]
        if not fns:
            raise InvalidRequestError(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    schemas = [_call_schema(f) for f in fns]
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def tool_call_constraint(tools: list[dict[str, Any]], tool_choice: Any = "auto") -> Constraint | None:
    """The constraint for a chat request with tools; None when tool_choice is "none"."""
    if tool_choice in (None, "auto"):
        schema = tool_call_schema(tools)
        # A call (JSON) or a plain answer that does not start with "{" (nor whitespace).
        lark = f"start: call | TEXT\ncall: {lark_json(schema)}\nTEXT: /[^{{\\s](?s:.*)/\n"
        return Constraint(kind="grammar", spec=lark, tool_calls=True)
    if tool_choice == "none":
        return None
    if tool_choice == "required":
        return Constraint(kind="json_schema", spec=tool_call_schema(tools), tool_calls=True)
    if isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        name = tool_choice["function"].get("name")
        return Constraint(kind="json_schema", spec=tool_call_schema(tools, name), tool_calls=True)
    raise InvalidRequestError(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}",
        "tool_choice",
    )


def parse_tool_calls(text: str) -> list[dict[str, Any]]:
    """OpenAI-style ``tool_calls`` from the model's output; [] when the output is not a call."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return []
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        return []
    calls = data if isinstance(data, list) else [data]
    out = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return []
        out.append({
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
        })
    return out


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """System-prompt text that tells a model without native tool support how to call the tools."""
    lines = [
        "You can call these tools. To call one, reply with only a JSON object "
        '{"name": <tool name>, "arguments": {...}} and nothing else.',
    ]
    for fn in _functions(tools):
        lines.append(json.dumps({"name": fn["name"], "description": fn.get("description", ""),
                                 "parameters": fn.get("parameters", {})}, ensure_ascii=False))
    return "\n".join(lines)


def tool_call_message_content(tool_calls: list[dict[str, Any]]) -> str:
    """How an assistant message's earlier tool calls are written back into the prompt (same JSON shape)."""
    calls = []
    for call in tool_calls:
        fn = call.get("function", {})
        args = fn.get("arguments", "{}")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            parsed = args
        calls.append({"name": fn.get("name", ""), "arguments": parsed})
    return json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
