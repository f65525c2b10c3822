"""OpenAI Responses API (``/v1/responses``), streamed and not: ``on_request / on_chunk / on_response``.

The Responses API has no finish reason; its status and ``incomplete_details.reason`` are mapped onto
the chat-completions words the analyzers know (stop, length, content_filter, tool_calls), and the raw
status is kept beside them.
"""

from __future__ import annotations

from collections.abc import Mapping

from .observation import Observation
from .openai_parser import _intv, _num
from .segments import canonical, part_text

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _content_text(content: object) -> str:
    if isinstance(content, list):  # input_text / output_text parts
        return "\n".join(
            str(p.get("text", "")) if isinstance(p, Mapping) and "text" in p else canonical(p)
            for p in content
        )
    return part_text(content)


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
        model = body.get("model")
        o.model = model if isinstance(model, str) else "unknown"
        o.stream = body.get("stream") is True
        o.temperature = _num(body.get("temperature"))
        o.top_p = _num(body.get("top_p"))
        o.max_tokens = _intv(body.get("max_output_tokens"))
        text = body.get("text")
        fmt = text.get("format") if isinstance(text, Mapping) else None
        if isinstance(fmt, Mapping) and isinstance(fmt.get("type"), str):
            o.output_type = "json" if str(fmt["type"]).startswith("json") else str(fmt["type"])
        segments: list[tuple[str, str]] = []
        tools = body.get("tools")
        if isinstance(tools, list) and tools:
            o.tools = len(tools)
            segments.append(("tools", canonical(tools)))
        if isinstance(body.get("instructions"), str):
            o.system_text = str(body["instructions"])
            segments.append(("system", o.system_text))
        items = body.get("input")
        if isinstance(items, str):
            segments.append(("user", items))
        elif isinstance(items, list):
            last_user = max(
                (i for i, m in enumerate(items) if isinstance(m, Mapping) and m.get("role") == "user"),
                default=-1,
            )
            for i, m in enumerate(items):
                if not isinstance(m, Mapping):
                    continue
                role = str(m.get("role") or m.get("type") or "item")
                text_ = _content_text(m.get("content")) if "content" in m else canonical(m)
                if role in ("system", "developer"):
                    o.system_text = text_ if o.system_text is None else f"{o.system_text}\n{text_}"
                    segments.append(("system", text_))
                else:
                    segments.append(("user" if i == last_user else f"history:{role}", text_))
        o.segments = segments

    def on_chunk(self, event: bytes | None, data: bytes, t_ns: int) -> None:
        o = self.obs
        msg = o.stream_event(data, t_ns)
        if msg is None:
            return
        kind = msg.get("type")
        if kind == "response.output_text.delta":
            delta = msg.get("delta")
            if delta:
                o.content(delta, t_ns)
        elif kind == "response.function_call_arguments.delta":
            o.tool_delta(msg.get("delta"), t_ns)
        elif kind == "response.output_item.added":
            item = msg.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                o.tool_calls += 1
                self._saw_call = True
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
        for item in msg.get("output") or ():
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                for part in item.get("content") or ():
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        o.output_parts.append(part["text"])
            elif item.get("type") == "function_call":
                o.tool_calls += 1
                self._saw_call = True
                if isinstance(item.get("arguments"), str):
                    o.output_parts.append(item["arguments"])
        self._final(msg)
        o.done = True
