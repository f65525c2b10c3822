"""Anthropic messages, streamed and not: ``on_request / on_chunk / on_response``.

The stream is a sequence of typed events (message_start, content_block_start/delta/stop, message_delta,
message_stop, ping, error); usage arrives in two halves (input counts first, output counts last).
"""

from __future__ import annotations

from collections.abc import Mapping

from llmtrace.adapters.middleware import cache_diagnostics
from llmtrace.adapters.middleware.observation import Observation, integer, number
from llmtrace.tracer.reading import assistant_turn
from llmtrace.tracer.reading.segments import canonical, part_text, turn_segments
from llmtrace.tracer.record import usage as usage_mod


def _message_text(m: Mapping[str, object]) -> str:
    return part_text(m.get("content"))


class AnthropicParser:
    """Parser for ``/v1/messages``."""

    provider = "anthropic"
    usage_style = "anthropic"
    operation = "chat"
    __slots__ = ("obs", "_usage_start")

    def __init__(self) -> None:
        self.obs = Observation()
        self._usage_start: dict[str, object] | None = None

    def on_request(self, body: Mapping[str, object]) -> None:
        o = self.obs
        segments = o.begin_request(body)
        o.top_k = number(body.get("top_k"))
        o.max_tokens = integer(body.get("max_tokens"))
        stop = body.get("stop_sequences")
        o.stop = [s for s in stop if isinstance(s, str)] if isinstance(stop, list) else []
        thinking = body.get("thinking")
        if isinstance(thinking, Mapping):
            o.reasoning_budget = integer(thinking.get("budget_tokens"))
        system = body.get("system")
        if system:
            o.system_text = part_text(system)
            segments.append(("system", o.system_text))
        messages = body.get("messages")
        if isinstance(messages, list):
            # The system prompt is its own field here: no turn is read as a system turn.
            o.turns = assistant_turn.of_messages(messages, assistant_turn.anthropic_turn, len(segments))
            segments += turn_segments(messages, _message_text)[0]
        o.segments = segments

    def on_chunk(self, event: bytes | None, data: bytes, t_ns: int) -> None:
        o = self.obs
        msg = o.stream_event(data, t_ns)
        kind = msg.get("type")
        if kind == "content_block_delta":
            delta = msg.get("delta")
            if not isinstance(delta, dict):
                return
            dt = delta.get("type")
            at = msg.get("index", 0)
            if dt == "text_delta":
                text = delta.get("text")
                if text:
                    o.content(text, t_ns, at)
            elif dt == "input_json_delta":
                o.tool_delta(delta.get("partial_json"), t_ns)
                if at in o.turn.calls:
                    o.turn.add_call(at, args=delta.get("partial_json"))
            elif dt == "thinking_delta":
                o.reasoning_chars += len(str(delta.get("thinking", "")))
                o.last_token_ns = t_ns
        elif kind == "content_block_start":
            block = msg.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                o.tool_calls += 1
                if not o.first_tool_ns:
                    o.first_tool_ns = t_ns
                o.turn.add_call(msg.get("index", 0), block.get("name"), start=block.get("input"), streamed=True)
            elif isinstance(block, dict) and block.get("type") == "text":
                o.turn.add_text(msg.get("index", 0), str(block.get("text") or ""))
        elif kind == "message_start":
            m = msg.get("message")
            if isinstance(m, dict):
                o.response_id = m.get("id")
                o.response_model = m.get("model")
                o.cache_diagnosis = cache_diagnostics.from_anthropic(m.get("diagnostics"))
                if isinstance(m.get("usage"), dict):
                    self._usage_start = m["usage"]
                    o.usage_raw = dict(m["usage"])
        elif kind == "message_delta":
            delta = msg.get("delta")
            if isinstance(delta, dict):
                if isinstance(delta.get("stop_reason"), str):
                    o.finish_reasons.append(delta["stop_reason"])
                if isinstance(delta.get("stop_sequence"), str):
                    o.stop_sequence = delta["stop_sequence"]
            if isinstance(msg.get("usage"), dict):
                o.usage_raw = usage_mod.merge_anthropic(self._usage_start, msg["usage"])
        elif kind == "message_stop":
            o.done = True
        elif kind == "error":
            self.obs.provider_error(msg.get("error"))

    def on_response(self, body: bytes) -> None:
        o = self.obs
        msg = o.body(body)
        if msg is None:
            return
        if msg.get("type") == "error" or "error" in msg:
            o.provider_error(msg.get("error"))
            return
        o.answered(msg)
        o.cache_diagnosis = cache_diagnostics.from_anthropic(msg.get("diagnostics"))
        for at, block in enumerate(msg.get("content") or ()):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                o.output_parts.append(block["text"])
                o.turn.add_text(at, block["text"])
            elif block.get("type") == "tool_use":
                o.tool_calls += 1
                o.output_parts.append(canonical(block.get("input")))
                o.turn.add_call(at, block.get("name"), assistant_turn.arguments(block.get("input")))
        if isinstance(msg.get("stop_reason"), str):
            o.finish_reasons.append(msg["stop_reason"])
        if isinstance(msg.get("stop_sequence"), str):
            o.stop_sequence = msg["stop_sequence"]
