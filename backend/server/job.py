"""What a parsed API request becomes inside the server, whichever wire format it came in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from llmtrace.backend.generation.params import SamplingParams

Endpoint = Literal["chat", "completions", "messages", "responses"]


@dataclass(slots=True)
class Job:
    """One generation request, protocol-neutral. ``messages`` are OpenAI-style dicts (role, content,
    tool_calls, tool_call_id); ``prompt`` is set instead for the completions endpoint."""

    endpoint: Endpoint
    requested_model: str | None
    params: SamplingParams
    stream: bool = False
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    tools: list[dict[str, Any]] | None = None  # OpenAI function-tool format
    tool_choice: Any = None
    max_tokens_given: bool = False
    include_usage: bool = False
    logprobs: bool = False
    echo: bool = False
    output_type: str = "text"  # text, json or tool_calls

    @property
    def api(self) -> Literal["openai", "anthropic"]:
        return "anthropic" if self.endpoint == "messages" else "openai"

    @property
    def operation(self) -> str:
        return "text_completion" if self.endpoint == "completions" else "chat"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The finished generation, what every response format is built from."""

    text: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    tool_calls: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None  # OpenAI chat ``logprobs.content`` items, when asked for
    stop_sequence: str | None = None  # the stop string that ended generation, if one did
