"""What one call revealed, filled in by a protocol parser and read once by the call recorder.

Parsers write plain values here as the request goes out and the response streams back; nothing in this
record touches OpenTelemetry, so parsing stays cheap and testable on byte streams alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    reasoning_chars: int = 0
    error_type: str | None = None
    error_message: str | None = None
    done: bool = False  # the protocol's own end marker was seen ([DONE], message_stop, a full JSON body)

    @property
    def output_text(self) -> str:
        return "".join(self.output_parts)
