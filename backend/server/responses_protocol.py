"""OpenAI Responses wire format (``POST /v1/responses``): requests in, response objects and the SSE event
sequence out.

A Responses request is turned into the chat-completions request it means (``instructions`` as the system
message, ``input`` items as messages, flat function tools as chat tools, ``text.format`` as
``response_format``, ``max_output_tokens`` as ``max_tokens``) and parsed by the chat parser, so both APIs
share one validation, one Intake and one engine path, and the pass span and its stages are the same.

``previous_response_id`` continues a conversation the server kept: the conversation each response ended
with (its input items and its output, without its instructions, which the API does not carry over) is
held in a bounded in-memory LRU (``responses_store.ResponsesStore``). The follow-up's prompt is that
conversation plus the new input, so its rendered prompt extends the previous one and the prefix cache
serves the shared part.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from llmtrace.backend.generation.params import SpeculationConfig
from llmtrace.backend.server import openai_protocol as oai
from llmtrace.backend.server.errors import APIError, bad_request
from llmtrace.backend.server.fields import MAX_TOKENS_BOUND, get_bool, get_dict, get_number, get_str
from llmtrace.backend.server.job import Job, Outcome
from llmtrace.backend.server.responses_store import ResponsesStore
from llmtrace.tracer.registry.finish_reason import normalize_finish_reason

ID_PREFIX = "resp_"
# Fields of a Responses body that are not chat-completions fields (converted or only echoed); everything
# else (temperature, top_p, seed and the vLLM extras such as top_k, ignore_eos, speculative) passes through.
_RESPONSES_ONLY = frozenset((
    "input", "instructions", "text", "max_output_tokens", "previous_response_id", "store", "include",
    "reasoning", "truncation", "parallel_tool_calls", "metadata", "user", "background", "service_tier",
    "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "conversation", "prompt", "top_logprobs",
    "stream_options", "max_tool_calls", "tools", "tool_choice", "context_management",
    # chat-only names a Responses request must not smuggle in
    "messages", "response_format", "max_tokens", "max_completion_tokens", "logprobs", "n",
))
_MESSAGE_ROLES = ("user", "system", "developer", "assistant")


# ───────────────────────────────────────────────────────────────────────────── requests
@dataclass(slots=True)
class ResponsesJob(Job):
    """A chat job plus what the Responses API echoes back and keeps."""

    instructions: str | None = None
    conversation: list[dict[str, Any]] = field(default_factory=list)  # previous turns + this input
    previous_response_id: str | None = None
    store: bool = True
    keeper: ResponsesStore | None = None
    conversation_id: str | None = None  # the first response's id of a previous_response_id chain
    echoed: dict[str, Any] = field(default_factory=dict)  # request fields the response object repeats


def _text_of_parts(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string or a list of content parts", where)
    parts = []
    for i, p in enumerate(content):
        if not isinstance(p, dict) or not isinstance(p.get("type"), str):
            raise bad_request(f"{where}[{i}] must be an object with a 'type'", where)
        kind = p["type"]
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(p.get("text"), str):
                raise bad_request(f"{where}[{i}] needs a string 'text'", where)
            parts.append(p["text"])
        elif kind == "refusal":
            parts.append(str(p.get("refusal", "")))
        else:
            raise bad_request(f"{where}[{i}]: this model takes text only, got a {kind!r} part", where)
    return "".join(parts)


def input_messages(items: Any) -> list[dict[str, Any]]:
    """Responses ``input`` (a string or a list of items) as chat messages."""
    if isinstance(items, str):
        if not items:
            raise bad_request("'input' must not be empty", "input")
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad_request("'input' must be a string or a non-empty list of input items", "input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in _MESSAGE_ROLES:
                raise bad_request(f"{where}.role must be one of {', '.join(_MESSAGE_ROLES)}, got {role!r}", where)
            out.append({"role": "system" if role == "developer" else role,
                        "content": _text_of_parts(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise bad_request(f"{where}: a function_call needs a string 'call_id' and 'name'", where)
            call = {"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": str(item.get("arguments") or "{}")}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") and not last["content"]:
                last["tool_calls"].append(call)  # parallel calls of one turn stay one assistant message
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise bad_request(f"{where}: a function_call_output needs a string 'call_id'", where)
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text_of_parts(output, f"{where}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "reasoning":
            continue  # this model does not reason in a separate channel; nothing to replay
        else:
            raise bad_request(f"{where}.type {kind!r} is not supported (message, function_call, "
                              "function_call_output)", where)
    return out


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, Any]:
    """Flat Responses function tools and tool_choice in the chat-completions shape."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None, body.get("tool_choice")
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list", "tools")
    converted = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else type(t).__name__
            raise bad_request(f"tools[{i}]: only function tools run on this server, got {kind!r}", "tools")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise bad_request(f"tools[{i}] needs a 'name'", "tools")
        converted.append({"type": "function", "function": {
            "name": t["name"], "description": t.get("description") or "",
            "parameters": t.get("parameters") or {"type": "object", "properties": {}}}})
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice must be none, auto, required or {'type': 'function', 'name': ...}",
                              "tool_choice")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return converted, choice


def _response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """``text.format`` as the chat ``response_format`` (json_schema's schema sits one level up here)."""
    text = get_dict(body, "text") or {}
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise bad_request("text.format must be an object", "text.format")
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise bad_request("text.format.schema must be an object", "text.format")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name") or "output", "schema": schema}}
    raise bad_request(f"text.format.type must be text, json_object or json_schema, got {kind!r}", "text.format")


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """Fields whose meaning this server cannot honour are refused rather than silently dropped."""
    if body.get("conversation") is not None:
        raise bad_request("'conversation' objects are not kept on this server; continue a conversation with "
                          "previous_response_id", "conversation")
    if body.get("background"):
        raise bad_request("background responses are not supported; use stream=true", "background")
    if body.get("prompt") is not None:
        raise bad_request("stored prompt templates are not supported; send instructions and input", "prompt")


def parse_responses(body: dict[str, Any], default_max_tokens: int = oai.DEFAULT_MAX_TOKENS,
                    speculation: SpeculationConfig = oai.NO_SPECULATION,
                    keeper: ResponsesStore | None = None) -> ResponsesJob:
    _refuse_unsupported(body)
    instructions = get_str(body, "instructions")
    previous_id = get_str(body, "previous_response_id")
    store = get_bool(body, "store", True)
    history: list[dict[str, Any]] = []
    conversation_id = None
    if previous_id is not None:
        found = keeper.kept(previous_id) if keeper is not None else None
        if found is None:
            raise APIError(404, f"Previous response with id '{previous_id}' not found.",
                           param="previous_response_id", code="previous_response_not_found")
        history, conversation_id = orjson.loads(found.conversation), found.conversation_id
    if body.get("input") is None:
        raise bad_request("'input' is required", "input")
    conversation = [*history, *input_messages(body["input"])]
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + conversation
    tools, tool_choice = _tools(body)
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _RESPONSES_ONLY}
    chat["messages"] = messages
    if tools:
        chat["tools"], chat["tool_choice"] = tools, tool_choice
    fmt = _response_format(body)
    if fmt is not None:
        chat["response_format"] = fmt
    max_out = get_number(body, "max_output_tokens", None, integer=True, maximum=MAX_TOKENS_BOUND)
    if max_out is not None:
        if max_out < 1:
            raise bad_request(f"'max_output_tokens' must be >= 1, got {max_out}", "max_output_tokens")
        chat["max_tokens"] = max_out
    include = body.get("include") or []
    if not isinstance(include, list):
        raise bad_request("'include' must be a list", "include")
    if "message.output_text.logprobs" in include:
        chat["logprobs"] = True
        chat["top_logprobs"] = get_number(body, "top_logprobs", 0, integer=True)
    job = oai.parse_chat(chat, default_max_tokens, speculation)
    echoed = {
        "instructions": instructions, "max_output_tokens": max_out, "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True), "previous_response_id": previous_id,
        "store": store, "text": {"format": body["text"]["format"] if fmt is not None else {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "temperature": job.params.temperature, "top_p": job.params.top_p,
        "truncation": body.get("truncation") or "disabled", "user": body.get("user"),
        "reasoning": {"effort": None, "summary": None},
    }
    base = {f.name: getattr(job, f.name) for f in fields(Job)}
    base["endpoint"] = "responses"
    return ResponsesJob(**base, instructions=instructions, conversation=conversation,
                        previous_response_id=previous_id, store=store, keeper=keeper,
                        conversation_id=conversation_id, echoed=echoed)


# ───────────────────────────────────────────────────────────────────────────── responses
def _message_id(rid: str) -> str:
    return "msg_" + rid.removeprefix(ID_PREFIX)


def _call_items(o: Outcome) -> list[dict[str, Any]]:
    items = []
    for call in o.tool_calls or []:
        fn = call.get("function", {})
        call_id = str(call.get("id", ""))
        items.append({"type": "function_call", "id": "fc_" + call_id.removeprefix("call_"), "call_id": call_id,
                      "name": fn.get("name", ""), "arguments": fn.get("arguments") or "{}", "status": "completed"})
    return items


def _message_item(rid: str, text: str, status: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"type": "message", "id": _message_id(rid), "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}]}


def _status(o: Outcome) -> tuple[str, dict[str, Any] | None]:
    reason = normalize_finish_reason(o.finish_reason)
    if reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def usage(o: Outcome) -> dict[str, Any]:
    """Like chat completions, input_tokens include the cached ones."""
    return {"input_tokens": o.prompt_tokens, "input_tokens_details": {"cached_tokens": o.cached_tokens},
            "output_tokens": o.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": o.prompt_tokens + o.output_tokens}


def _skeleton(rid: str, model: str, job: ResponsesJob, created: int) -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": created, "status": "in_progress", "error": None,
            "incomplete_details": None, "model": model, "output": [], "usage": None, **job.echoed}


def response_object(rid: str, model: str, o: Outcome, job: ResponsesJob, created: int) -> dict[str, Any]:
    """The finished response; also keeps its conversation for a later ``previous_response_id``."""
    status, details = _status(o)
    output = _call_items(o) if o.tool_calls else [_message_item(rid, o.text, status, o.logprobs)]
    resp = {**_skeleton(rid, model, job, created), "status": status, "incomplete_details": details,
            "output": output, "usage": usage(o), "completed_at": int(time.time()) if status == "completed" else None}
    if job.store and job.keeper is not None:
        reply = ({"role": "assistant", "content": "", "tool_calls": o.tool_calls} if o.tool_calls
                 else {"role": "assistant", "content": o.text})
        job.keeper.put(rid, [*job.conversation, reply], resp, job.conversation_id)
    return resp


class ResponsesStream:
    """response.created / in_progress, then per output item: output_item.added, content_part.added,
    output_text.delta... (or function_call_arguments.delta/done), the .done events, and response.completed
    (response.incomplete at the max_output_tokens cap)."""

    def __init__(self, rid: str, model: str, job: ResponsesJob) -> None:
        self.rid, self.model, self.job = rid, model, job
        self.created = int(time.time())
        self._seq = 0
        self._text_open = False
        self._text: list[str] = []
        self._logprobs: list[dict[str, Any]] = []

    def _event(self, kind: str, **payload: Any) -> bytes:
        data = {"type": kind, **payload, "sequence_number": self._seq}
        self._seq += 1
        return f"event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"

    def opening(self) -> list[bytes]:
        resp = _skeleton(self.rid, self.model, self.job, self.created)
        return [self._event("response.created", response=resp), self._event("response.in_progress", response=resp)]

    def _open_text(self) -> list[bytes]:
        self._text_open = True
        item = {**_message_item(self.rid, "", "in_progress", None), "content": []}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [self._event("response.output_item.added", output_index=0, item=item),
                self._event("response.content_part.added", item_id=item["id"], output_index=0, content_index=0,
                            part=part)]

    def text(self, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[bytes]:
        if not delta:
            return []
        out = [] if self._text_open else self._open_text()
        self._text.append(delta)
        self._logprobs += logprobs or []
        out.append(self._event("response.output_text.delta", item_id=_message_id(self.rid), output_index=0,
                               content_index=0, delta=delta, logprobs=logprobs or []))
        return out

    def closing(self, o: Outcome) -> list[bytes]:
        final = response_object(self.rid, self.model, o, self.job, self.created)
        out: list[bytes] = []
        index = 0
        if not o.tool_calls:
            if not self._text_open:
                out += self._open_text()  # an empty answer is still one (empty) message
            item = final["output"][0]
            part = item["content"][0]
            mid = item["id"]
            out += [self._event("response.output_text.done", item_id=mid, output_index=0, content_index=0,
                                text=part["text"], logprobs=part["logprobs"]),
                    self._event("response.content_part.done", item_id=mid, output_index=0, content_index=0,
                                part=part),
                    self._event("response.output_item.done", output_index=0, item=item)]
        else:
            for item in final["output"]:
                started = {**item, "arguments": "", "status": "in_progress"}
                out += [self._event("response.output_item.added", output_index=index, item=started),
                        self._event("response.function_call_arguments.delta", item_id=item["id"],
                                    output_index=index, delta=item["arguments"]),
                        self._event("response.function_call_arguments.done", item_id=item["id"],
                                    output_index=index, name=item["name"], arguments=item["arguments"]),
                        self._event("response.output_item.done", output_index=index, item=item)]
                index += 1
        kind = "response.completed" if final["status"] == "completed" else f"response.{final['status']}"
        out.append(self._event(kind, response=final))
        return out

    def error(self, message: str) -> list[bytes]:
        failed = {**_skeleton(self.rid, self.model, self.job, self.created), "status": "failed",
                  "error": {"code": "server_error", "message": message}}
        return [self._event("error", code="server_error", message=message, param=None),
                self._event("response.failed", response=failed)]
