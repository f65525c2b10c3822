"""OpenAI chat completions (and legacy completions), streamed and not.

The three verbs are ``on_request / on_chunk / on_response``.

Reads the request body the SDK built and the response events as the app reads them; fills an
``Observation``. Never raises: a malformed event is skipped (the caller counts it).
"""

from __future__ import annotations

from collections.abc import Mapping

from llmtrace.adapters.middleware.observation import Message, Observation, format_type, integer, number
from llmtrace.tracer.reading import assistant_turn
from llmtrace.tracer.reading.segments import canonical, part_text, turn_segments


def _message_text(m: Mapping[str, object]) -> str:
    # An assistant turn's tool calls (ids included) are part of what the model sees again.
    text = part_text(m.get("content"))
    return text + canonical(m["tool_calls"]) if m.get("tool_calls") else text


class OpenAIParser:
    """Parser for ``/chat/completions`` (operation ``chat``) and ``/completions`` (``text_completion``)."""

    provider = "openai"
    usage_style = "openai"
    __slots__ = ("obs", "operation", "_tool_ids")

    def __init__(self, operation: str = "chat") -> None:
        self.obs = Observation()
        self.operation = operation
        self._tool_ids: set[tuple[int, int]] = set()

    # ── request ─────────────────────────────────────────────────────────────────────────────
    def on_request(self, body: Mapping[str, object]) -> None:
        o = self.obs
        segments = o.begin_request(body)
        o.top_k = number(body.get("top_k"))
        o.seed = integer(body.get("seed"))
        o.max_tokens = integer(body.get("max_completion_tokens", body.get("max_tokens")))
        o.frequency_penalty = number(body.get("frequency_penalty"))
        o.presence_penalty = number(body.get("presence_penalty"))
        stop = body.get("stop")
        o.stop = (
            [stop]
            if isinstance(stop, str)
            else [s for s in stop if isinstance(s, str)]
            if isinstance(stop, list)
            else []
        )
        o.output_type = format_type(body.get("response_format"))
        messages = body.get("messages")
        if isinstance(messages, list):
            turns, system = turn_segments(messages, _message_text, system_roles=("system", "developer"))
            o.turns = assistant_turn.of_messages(messages, assistant_turn.chat_turn, len(segments))
            segments += turns
            if system:
                o.system_text = "\n".join(system)
        elif isinstance(body.get("prompt"), str):
            segments.append(("user", str(body["prompt"])))
        o.segments = segments

    # ── streamed response ───────────────────────────────────────────────────────────────────
    def on_chunk(self, event: bytes | None, data: bytes, t_ns: int) -> None:
        o = self.obs
        if data == b"[DONE]":
            o.done = True
            return
        msg = o.stream_event(data, t_ns)
        if not msg:
            return
        if "error" in msg:
            self.obs.provider_error(msg["error"], "code")
            return
        if o.response_id is None:
            o.response_id = msg.get("id")
            o.response_model = msg.get("model")
        usage = msg.get("usage")
        if isinstance(usage, dict):
            o.usage_raw = usage
            if msg.get("choices") == []:
                o.usage_only_at = o.chunks - 1
        for choice in msg.get("choices") or ():
            self._choice_delta(choice, t_ns)

    def _choice_delta(self, choice: Message, t_ns: int) -> None:
        o = self.obs
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            tool_calls = delta.get("tool_calls")
        else:  # legacy completions stream "text" on the choice itself
            content, reasoning, tool_calls = choice.get("text"), None, None
        first = choice.get("index", 0) in (0, None)  # the turn an app writes back is the first choice
        if content:
            o.content(content, t_ns, 0 if first else None)
        if reasoning and isinstance(reasoning, str):
            o.reasoning_chars += len(reasoning)
            o.last_token_ns = t_ns
        if tool_calls and isinstance(tool_calls, list):
            o.tool_delta(None, t_ns)
            ci = choice.get("index", 0)
            for tc in tool_calls:
                if isinstance(tc, dict):
                    key = (
                        ci if isinstance(ci, int) else 0,
                        tc.get("index", 0) if isinstance(tc.get("index"), int) else 0,
                    )
                    if key not in self._tool_ids:
                        self._tool_ids.add(key)
                        o.tool_calls += 1
                    fn = tc.get("function")
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        o.output_parts.append(fn["arguments"])
                    if first and isinstance(fn, dict):
                        o.turn.add_call(key, fn.get("name"), fn.get("arguments"))
        fr = choice.get("finish_reason")
        if isinstance(fr, str):
            o.finish_reasons.append(fr)
        _stop_reason(o, choice)

    # ── buffered response ───────────────────────────────────────────────────────────────────
    def on_response(self, body: bytes) -> None:
        o = self.obs
        msg = o.body(body)
        if msg is None:
            return
        if "error" in msg:
            o.provider_error(msg["error"], "code")
            return
        o.answered(msg)
        for choice in msg.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            m = choice.get("message")
            first = choice.get("index", 0) in (0, None) and not o.turn.texts  # the turn an app writes back
            if isinstance(m, dict):
                if isinstance(m.get("content"), str):
                    o.output_parts.append(m["content"])
                if first:
                    o.turn.add_text(0, part_text(m.get("content")))
                for k, tc in enumerate(m.get("tool_calls") or ()):
                    o.tool_calls += 1
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        o.output_parts.append(fn["arguments"])
                    if first and isinstance(tc, dict):
                        o.turn.add_call(k, *assistant_turn.tool_call(tc))
            elif isinstance(choice.get("text"), str):
                o.output_parts.append(choice["text"])
                if first:
                    o.turn.add_text(0, choice["text"])
            fr = choice.get("finish_reason")
            if isinstance(fr, str):
                o.finish_reasons.append(fr)
            _stop_reason(o, choice)


def _stop_reason(o: Observation, choice: dict[str, object]) -> None:
    """vLLM and servers like it name the stop string that ended a choice (``stop_reason``; OpenAI itself says
    only "stop"): kept where it is one of the request's, so the end is a stop string, not the end of the turn."""
    said = choice.get("stop_reason")
    if isinstance(said, str) and said in o.stop:
        o.stop_sequence = said
