"""What one call revealed, filled in by a protocol parser and read once by the call recorder.

Parsers write plain values here as the request goes out and the response streams back; nothing in this
record touches OpenTelemetry, so parsing stays cheap and testable on byte streams alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# orjson: ~3x faster than json.loads on small events; a core dependency
from orjson import JSONEncodeError, dumps, loads

from llmtrace.tracer.reading.assistant_turn import Turn
from llmtrace.tracer.reading.segments import canonical

# A provider's decoded JSON object: values are whatever it sent, so readers check what they rely on.
Message = dict[str, Any]


def number(v: object) -> float | None:
    """A JSON number as float (None for anything else, bools included)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def integer(v: object) -> int | None:
    """A JSON integer (None for anything else, bools included)."""
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def format_type(fmt: object) -> str | None:
    """The requested output type from a ``{"type": ...}`` format object; every ``json*`` kind is "json"."""
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if not isinstance(kind, str):
        return None
    return "json" if kind.startswith("json") else kind


def _as_sent(value: object) -> str:
    """The tools as the request serialises them, keys in the order the app built them: the server's
    template renders that order, so tools whose keys come in another order each call are other tokens (and
    a prefix-cache miss) though they sort equal."""
    try:
        return dumps(value).decode()
    except (JSONEncodeError, TypeError):
        return canonical(value)


@dataclass(slots=True)
class Observation:
    # ── the request ─────────────────────────────────────────────────────────────────────────
    model: str = "unknown"
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: list[str] = field(default_factory=list)
    tools: int = 0
    output_type: str | None = None
    reasoning_budget: int | None = None
    # (kind, text) per prompt segment: system, tools, history:<role>, user
    segments: list[tuple[str, str]] = field(default_factory=list)
    system_text: str | None = None
    # the canonical assistant turns among the segments, by segment index (their records' ``turn`` hash)
    turns: dict[int, str] = field(default_factory=dict)
    # ── the response ────────────────────────────────────────────────────────────────────────
    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    stop_sequence: str | None = None
    usage_raw: dict[str, object] | None = None
    first_chunk_ns: int = 0
    first_content_ns: int = 0
    first_tool_ns: int = 0
    last_token_ns: int = 0
    chunks: int = 0
    content_chunks: int = 0
    tool_calls: int = 0
    output_parts: list[str] = field(default_factory=list)
    # the answer's text blocks and tool calls, for its canonical turn (the output hash; assistant_turn.py)
    turn: Turn = field(default_factory=Turn)
    reasoning_chars: int = 0
    error_type: str | None = None
    error_message: str | None = None
    done: bool = False  # the protocol's own end marker was seen ([DONE], message_stop, a full JSON body)
    usage_only_at: int = -1  # index of a streamed event that carried only usage (choices empty)
    cache_diagnosis: tuple[str, int | None] | None = None  # the provider's (miss reason, missed tokens)

    @property
    def output_text(self) -> str:
        return "".join(self.output_parts)

    @property
    def provider_failed(self) -> bool:
        """The provider reported an error; a malformed event or body is only our own note."""
        return bool(self.error_type) and self.error_type not in ("malformed_event", "malformed_body")

    # ── what every protocol parser does the same way ─────────────────────────────────────────
    def begin_request(self, body: Mapping[str, object]) -> list[tuple[str, str]]:
        """Read the request fields every API names alike (model, stream, temperature, top_p, tools).

        Returns the prompt segments begun with the tools: templates put them before the system prompt,
        so the segment order is the order the model sees."""
        model = body.get("model")
        self.model = model if isinstance(model, str) else "unknown"
        self.stream = body.get("stream") is True
        self.temperature = number(body.get("temperature"))
        self.top_p = number(body.get("top_p"))
        tools = body.get("tools")
        if isinstance(tools, list) and tools:
            self.tools = len(tools)
            return [("tools", _as_sent(tools))]
        return []

    def stream_event(self, data: bytes, t_ns: int) -> Message:
        """Count one streamed chunk and parse its JSON; empty (noted once as malformed) if not an object,
        so a typed stream's dispatch on ``msg.get("type")`` passes it by with no check of its own."""
        if not self.first_chunk_ns:
            self.first_chunk_ns = t_ns
        self.chunks += 1
        return self._parse(data, "malformed_event") or {}

    def body(self, data: bytes) -> Message | None:
        """Parse a buffered response body; None (noted as malformed) if it is not a JSON object."""
        return self._parse(data, "malformed_body")

    def _parse(self, data: bytes, malformed: str) -> Message | None:
        try:
            msg = loads(data)
        except ValueError:
            self.error_type = self.error_type or malformed
            return None
        return msg if isinstance(msg, dict) else None

    def answered(self, msg: Mapping[str, Any]) -> None:
        """A whole buffered answer arrived: its end marker, id, model and usage."""
        self.done = True
        self.response_id = msg.get("id")
        self.response_model = msg.get("model")
        usage = msg.get("usage")
        if isinstance(usage, dict):
            self.usage_raw = usage

    def content(self, text: object, t_ns: int, block: object = 0) -> None:
        """A chunk of answer text arrived (of text block ``block``: a choice, a content block; None: a
        choice other than the first, which is no part of the turn an app writes back)."""
        if not self.first_content_ns:
            self.first_content_ns = t_ns
        self.content_chunks += 1
        self.last_token_ns = t_ns
        self.output_parts.append(str(text))
        if block is not None:
            self.turn.add_text(block, str(text))

    def tool_delta(self, arguments: object, t_ns: int) -> None:
        """A piece of a tool call arrived (its argument text, when it is text)."""
        if not self.first_tool_ns:
            self.first_tool_ns = t_ns
        self.last_token_ns = t_ns
        if isinstance(arguments, str):
            self.output_parts.append(arguments)

    def provider_error(self, err: object, *codes: str) -> None:
        """Note a provider's error object: its type (or the first of ``codes`` present) and message."""
        if isinstance(err, dict):
            self.error_type = str(next((err[k] for k in ("type", *codes) if err.get(k)), "error"))
            self.error_message = str(err.get("message", ""))[:500]
        else:
            self.error_type, self.error_message = "error", str(err)[:500]
