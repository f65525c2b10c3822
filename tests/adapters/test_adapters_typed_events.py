"""A streamed chunk that is not a JSON object, in the APIs whose events name their type (Anthropic messages,
OpenAI Responses): noted as malformed, counted, skipped, and the events after it still read."""

from __future__ import annotations

import json

import pytest

from llmtrace.adapters.middleware.anthropic_parser import AnthropicParser
from llmtrace.adapters.middleware.responses_parser import ResponsesParser

_ANTHROPIC = [{"type": "message_start", "message": {"id": "msg_1", "model": "claude"}},
              {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Oslo"}},
              {"type": "message_stop"}]
_RESPONSES = [{"type": "response.created", "response": {"id": "resp_1", "model": "gpt"}},
              {"type": "response.output_text.delta", "delta": "Oslo"},
              {"type": "response.completed", "response": {"id": "resp_1", "model": "gpt", "status": "completed"}}]


@pytest.mark.parametrize(("parser", "events"), [(AnthropicParser, _ANTHROPIC), (ResponsesParser, _RESPONSES)])
@pytest.mark.parametrize("bad", [b"{not json", b"[1, 2]", b'"text"'])
def test_a_chunk_that_is_not_an_object_is_skipped(parser: type, events: list[dict[str, object]], bad: bytes) -> None:
    p = parser()
    p.on_chunk(None, json.dumps(events[0]).encode(), 1)
    p.on_chunk(None, bad, 2)  # never raised into the app
    for n, event in enumerate(events[1:], 3):
        p.on_chunk(None, json.dumps(event).encode(), n)
    o = p.obs
    assert (o.response_id, o.output_text, o.done, o.chunks) in (("msg_1", "Oslo", True, 4), ("resp_1", "Oslo", True, 4))
    assert o.error_type == ("malformed_event" if bad == b"{not json" else None)
