"""Anthropic Messages wire format: requests in, message objects and the SSE event sequence out.

Anthropic reports ``input_tokens`` *excluding* the tokens read from cache (those are
``cache_read_input_tokens``), unlike OpenAI, whose ``prompt_tokens`` include them.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from llmtrace.backend.generation.params import Constraint, InvalidRequestError, SpeculationConfig
from llmtrace.backend.generation.tool_calls import tool_call_constraint
from llmtrace.backend.server.errors import bad_request
from llmtrace.backend.server.fields import MAX_TOKENS_BOUND, get_bool, get_dict, get_number, get_str
from llmtrace.backend.server.job import Job, Outcome
from llmtrace.backend.server.openai_protocol import NO_SPECULATION, sampling_params
from llmtrace.tracer.registry.finish_reason import normalize_finish_reason

# Canonical finish reasons (tracer.finish_reason) in Anthropic's words. The natural end (the model's
# end-of-turn token, a finished grammar) is end_turn; stop_sequence is only for a stop string the user sent.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "content_filter": "refusal"}


def _stop_reason(o: Outcome) -> str:
    if o.stop_sequence:
        return "stop_sequence"
    return STOP_REASONS.get(normalize_finish_reason(o.finish_reason) or "stop", "end_turn")


def _text_of(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise bad_request(f"{where} must be a string or a list of content blocks", where)
    parts = []
    for b in blocks:
        if not isinstance(b, dict):
            raise bad_request(f"{where} blocks must be objects", where)
        if b.get("type") == "text":
            if not isinstance(b.get("text"), str):
                raise bad_request(f"{where} text blocks need a string 'text'", where)
            parts.append(b["text"])
    return "".join(parts)


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if messages is None:
        raise bad_request("messages: field required", "messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: must be a non-empty list", "messages")
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        out.append({"role": "system", "content": _text_of(system, "system")})
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad_request(f"{where}: role must be 'user' or 'assistant'", where)
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise bad_request(f"{where}.content: must be a string or a list of content blocks", where)
        text_parts: list[str] = []
        tool_calls: list[dict[str, Any]] = []
        for b in content:
            if not isinstance(b, dict) or not isinstance(b.get("type"), str):
                raise bad_request(f"{where}.content: blocks must be objects with a 'type'", where)
            kind = b["type"]
            if kind in ("image", "document"):
                raise bad_request(f"{where}.content: this model takes text only, got a {kind!r} block", where)
            if kind == "text":
                if not isinstance(b.get("text"), str):
                    raise bad_request(f"{where}.content: text blocks need a string 'text'", where)
                text_parts.append(b["text"])
            elif kind == "tool_use":
                tool_calls.append({"id": b.get("id", ""), "type": "function", "function": {
                    "name": b.get("name", ""), "arguments": json.dumps(b.get("input", {}))}})
            elif kind == "tool_result":
                result = b.get("content", "")
                out.append({"role": "tool", "tool_call_id": b.get("tool_use_id", ""),
                            "content": _text_of(result, f"{where}.content.tool_result")})
        if text_parts or tool_calls or not content:
            msg: dict[str, Any] = {"role": m["role"], "content": "".join(text_parts)}
            if tool_calls:
                msg["tool_calls"] = tool_calls
            out.append(msg)
    return out


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, Any]:
    tools = body.get("tools")
    if not tools:
        return None, None
    if not isinstance(tools, list):
        raise bad_request("tools: must be a list", "tools")
    converted = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise bad_request(f"tools.{i}: needs a 'name'", "tools")
        converted.append({"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}})
    choice = get_dict(body, "tool_choice") or {"type": "auto"}
    kind = choice.get("type")
    mapped: Any
    if kind == "auto":
        mapped = "auto"
    elif kind == "any":
        mapped = "required"
    elif kind == "none":
        mapped = "none"
    elif kind == "tool":
        mapped = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        raise bad_request("tool_choice.type must be auto, any, tool or none", "tool_choice")
    return converted, mapped


def _output_format(body: dict[str, Any]) -> Constraint | None:
    """Structured output: ``output_config.format = {"type": "json_schema", "schema": {...}}``."""
    config = get_dict(body, "output_config") or {}
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema", {}), dict):
        raise bad_request("output_config.format must be {'type': 'json_schema', 'schema': {...}}", "output_config")
    return Constraint(kind="json_schema", spec=fmt.get("schema") or {"type": "object"})


def parse_messages(body: dict[str, Any], speculation: SpeculationConfig = NO_SPECULATION) -> Job:
    model = get_str(body, "model", required=True)
    max_tokens = get_number(body, "max_tokens", None, integer=True, maximum=MAX_TOKENS_BOUND)
    if max_tokens is None:
        raise bad_request("max_tokens: field required", "max_tokens")
    messages = _messages(body)
    tools, tool_choice = _tools(body)
    constraint = None
    if tools:
        try:
            constraint = tool_call_constraint(tools, tool_choice)
        except InvalidRequestError as exc:
            raise bad_request(str(exc), exc.param) from None
    output_type = "tool_calls" if constraint is not None else "text"
    if constraint is None:
        constraint = _output_format(body)
        output_type = "json" if constraint is not None else "text"
    params, _ = sampling_params(body, default_max_tokens=max_tokens, constraint=constraint,
                                stop_key="stop_sequences", speculation=speculation)
    return Job("messages", model, params, stream=get_bool(body, "stream", False), messages=messages,
               tools=tools, tool_choice=tool_choice, max_tokens_given=True, output_type=output_type)


def _usage(o: Outcome) -> dict[str, Any]:
    return {
        "input_tokens": o.prompt_tokens - o.cached_tokens,
        "output_tokens": o.output_tokens,
        "cache_read_input_tokens": o.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def _tool_blocks(o: Outcome) -> list[dict[str, Any]]:
    blocks = []
    for call in o.tool_calls or []:
        fn = call.get("function", {})
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = {}
        blocks.append({"type": "tool_use", "id": "toolu_" + call.get("id", "").removeprefix("call_"),
                       "name": fn.get("name", ""), "input": args})
    return blocks


def message_response(rid: str, model: str, o: Outcome) -> dict[str, Any]:
    content = _tool_blocks(o) if o.tool_calls else [{"type": "text", "text": o.text}]
    return {
        "id": rid, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": _stop_reason(o), "stop_sequence": o.stop_sequence,
        "usage": _usage(o),
    }


def event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + orjson.dumps(payload) + b"\n\n"


class AnthropicStream:
    """message_start, content_block_start/delta/stop, message_delta, message_stop."""

    def __init__(self, rid: str, model: str, job: Job) -> None:
        self.rid, self.model, self.job = rid, model, job
        self._started = False
        self._text_open = False

    def opening(self) -> list[bytes]:
        return []  # message_start waits for the first output, which knows the cached token count

    def start(self, prompt_tokens: int, cached_tokens: int) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        usage = {"input_tokens": prompt_tokens - cached_tokens, "output_tokens": 0,
                 "cache_read_input_tokens": cached_tokens, "cache_creation_input_tokens": 0}
        msg: dict[str, object] = {"id": self.rid, "type": "message", "role": "assistant", "model": self.model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": usage}
        return [event("message_start", {"type": "message_start", "message": msg}),
                event("ping", {"type": "ping"})]

    def text(self, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[bytes]:
        """A text delta (the Messages API has no log-probabilities: ``logprobs`` is never set here)."""
        if not delta:
            return []
        out = []
        if not self._text_open:
            self._text_open = True
            out.append(event("content_block_start", {"type": "content_block_start", "index": 0,
                                                     "content_block": {"type": "text", "text": ""}}))
        out.append(event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": delta}}))
        return out

    def closing(self, o: Outcome) -> list[bytes]:
        out = self.start(o.prompt_tokens, o.cached_tokens)
        index = 0
        if self._text_open:
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
            index = 1
        elif not o.tool_calls:
            # An empty answer is still one (empty) text block.
            out.append(event("content_block_start", {"type": "content_block_start", "index": 0,
                                                     "content_block": {"type": "text", "text": ""}}))
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        for block in _tool_blocks(o):
            start = {**block, "input": {}}
            out.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": start}))
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        out.append(event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(o), "stop_sequence": o.stop_sequence},
            "usage": {"output_tokens": o.output_tokens, "input_tokens": o.prompt_tokens - o.cached_tokens,
                      "cache_read_input_tokens": o.cached_tokens},
        }))
        out.append(event("message_stop", {"type": "message_stop"}))
        return out

    def error(self, message: str) -> list[bytes]:
        return [event("error", {"type": "error", "error": {"type": "api_error", "message": message}})]
