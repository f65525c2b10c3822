"""OpenAI Responses API (``/v1/responses``), streamed and not: ``on_request / on_chunk / on_response``.

The Responses API has no finish reason; its status and ``incomplete_details.reason`` are mapped onto
the chat-completions words the analyzers know (stop, length, content_filter, tool_calls), and the raw
status is kept beside them.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmtrace.adapters.middleware import cache_diagnostics
from llmtrace.adapters.middleware.observation import Observation, format_type, integer
from llmtrace.tracer.reading import assistant_turn
from llmtrace.tracer.reading.segments import canonical, part_text, turn_segments

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _content_text(content: object) -> str:
    if isinstance(content, list):  # input_text / output_text parts
        return "\n".join(
            str(p.get("text", "")) if isinstance(p, Mapping) and "text" in p else canonical(p)
            for p in content
        )
    return part_text(content)


def _item_text(m: Mapping[str, object]) -> str:
    # A message item has content; any other input item (a function call, its output) counts as its JSON.
    return _content_text(m.get("content")) if "content" in m else canonical(m)


def _item_role(m: Mapping[str, object]) -> str:
    return str(m.get("role") or m.get("type") or "item")


class ResponsesParser:
    provider = "openai"
    usage_style = "openai_responses"
    operation = "chat"
    __slots__ = ("obs", "status", "_saw_call")

    def __init__(self) -> None:
        self.obs = Observation()
        self.status: str | None = None
        self._saw_call = False

    def on_request(self, body: Mapping[str, object]) -> None:
        o = self.obs
        segments = o.begin_request(body)
        o.max_tokens = integer(body.get("max_output_tokens"))
        text = body.get("text")
        o.output_type = format_type(text.get("format") if isinstance(text, Mapping) else None)
        if isinstance(body.get("instructions"), str):
            o.system_text = str(body["instructions"])
            segments.append(("system", o.system_text))
        items = body.get("input")
        if isinstance(items, str):
            segments.append(("user", items))
        elif isinstance(items, list):
            o.turns = assistant_turn.of_items(items, _content_text, len(segments))
            turns, system = turn_segments(
                items, _item_text, role_of=_item_role, system_roles=("system", "developer")
            )
            segments += turns
            if system:
                o.system_text = "\n".join(system if o.system_text is None else [o.system_text, *system])
        o.segments = segments

    def on_chunk(self, event: bytes | None, data: bytes, t_ns: int) -> None:
        o = self.obs
        msg = o.stream_event(data, t_ns)
        kind = msg.get("type")
        at = msg.get("output_index", 0)
        if kind == "response.output_text.delta":
            delta = msg.get("delta")
            if delta:
                o.content(delta, t_ns, (at, msg.get("content_index", 0)))
        elif kind == "response.function_call_arguments.delta":
            o.tool_delta(msg.get("delta"), t_ns)
            if at in o.turn.calls:
                o.turn.add_call(at, args=msg.get("delta"))
        elif kind == "response.output_item.added":
            item = msg.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                o.tool_calls += 1
                self._saw_call = True
                o.turn.add_call(at, item.get("name"), item.get("arguments") or None)
        elif kind == "response.reasoning_summary_text.delta" or kind == "response.reasoning_text.delta":
            o.reasoning_chars += len(str(msg.get("delta", "")))
        elif kind == "response.created":
            self._head(msg.get("response"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._final(msg.get("response"))
            o.done = True
        elif kind == "error":
            o.error_type = str(msg.get("code") or "error")
            o.error_message = str(msg.get("message", ""))[:500]

    def _head(self, resp: object) -> None:
        if isinstance(resp, dict):
            self.obs.response_id = resp.get("id")
            self.obs.response_model = resp.get("model")

    def _final(self, resp: object) -> None:
        o = self.obs
        if not isinstance(resp, dict):
            return
        self._head(resp)
        o.cache_diagnosis = cache_diagnostics.from_openai(resp.get("prompt_cache_diagnostics"))
        if isinstance(resp.get("usage"), dict):
            o.usage_raw = resp["usage"]
        self.status = resp.get("status") if isinstance(resp.get("status"), str) else None
        err = resp.get("error")
        if self.status == "failed" and isinstance(err, dict):
            o.error_type = str(err.get("code") or "failed")
            o.error_message = str(err.get("message", ""))[:500]
        details = resp.get("incomplete_details")
        if self.status == "incomplete":
            reason = details.get("reason") if isinstance(details, dict) else None
            o.finish_reasons.append(_INCOMPLETE.get(str(reason), str(reason or "incomplete")))
        elif self.status == "completed":
            o.finish_reasons.append("tool_calls" if self._saw_call else "stop")

    def on_response(self, body: bytes) -> None:
        o = self.obs
        msg = o.body(body)
        if msg is None:
            return
        if isinstance(msg.get("error"), dict) and msg.get("object") != "response":
            o.provider_error(msg["error"], "code")
            return
        for at, item in enumerate(msg.get("output") or ()):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                for k, part in enumerate(item.get("content") or ()):
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        o.output_parts.append(part["text"])
                        o.turn.add_text((at, k), part["text"])
            elif item.get("type") == "function_call":
                o.tool_calls += 1
                self._saw_call = True
                if isinstance(item.get("arguments"), str):
                    o.output_parts.append(item["arguments"])
                o.turn.add_call(at, item.get("name"), item.get("arguments", ""))
        self._final(msg)
        o.done = True
