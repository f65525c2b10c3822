"""The protocol-parser interface and the choice of parser for a request's URL: OpenAI chat completions,
legacy completions and the Responses API, and Anthropic messages.

Every parser has the same three verbs: ``on_request(body)`` with the decoded request JSON,
``on_chunk(event, data, t_ns)`` for each server-sent event of a streamed answer, and
``on_response(body)`` with a buffered answer's bytes. They fill ``parser.obs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from llmtrace.adapters.middleware.anthropic_parser import AnthropicParser
from llmtrace.adapters.middleware.observation import Observation
from llmtrace.adapters.middleware.openai_parser import OpenAIParser
from llmtrace.adapters.middleware.responses_parser import ResponsesParser


class ProtocolParser(Protocol):
    provider: str
    operation: str
    usage_style: str  # how the API reports usage: openai, anthropic or openai_responses (see usage.py)
    obs: Observation

    def on_request(self, body: Mapping[str, object]) -> None: ...

    def on_chunk(self, event: bytes | None, data: bytes, t_ns: int) -> None: ...

    def on_response(self, body: bytes) -> None: ...


def parser_for(method: str, path: str) -> ProtocolParser | None:
    """The parser for an inference call, or None for anything else (model lists, files, ...)."""
    if method != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return OpenAIParser("chat")
    if path.endswith("/responses"):
        return ResponsesParser()
    if path.endswith("/messages") and not path.endswith("/count_tokens"):
        return AnthropicParser()
    if path.endswith("/completions"):
        return OpenAIParser("text_completion")
    return None
