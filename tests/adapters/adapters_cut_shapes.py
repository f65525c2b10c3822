"""Recorded-shape responses of a tool call cut at max_tokens, as the hosted providers send them: OpenAI chat
``tool_calls`` with partial arguments and finish_reason length (one call, or a whole call and a cut one in
parallel), a Responses ``function_call`` item of an incomplete response, Anthropic ``text`` + ``tool_use`` with
stop_reason max_tokens; unary bodies and SSE streams, for ``adapters_fake_provider``'s scripts."""

from __future__ import annotations

import json
from typing import Any

from adapters_fake_provider import sse

CUT = '{"ticket": "R-1'  # partial JSON: the call was cut inside its argument
WHOLE = '{"ticket": "R-0"}'
USAGE = {"prompt_tokens": 50, "completion_tokens": 6, "total_tokens": 56}
A_USAGE = {"input_tokens": 50, "output_tokens": 6}


def calls(parallel: bool) -> list[dict[str, Any]]:
    cut = {"id": "call_b", "type": "function", "function": {"name": "parts_stock", "arguments": CUT}}
    whole = {"id": "call_a", "type": "function", "function": {"name": "repair_status", "arguments": WHOLE}}
    return [whole, cut] if parallel else [cut]


def chat_body(parallel: bool) -> bytes:
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": None,
                                                            "tool_calls": calls(parallel)},
                                    "logprobs": None, "finish_reason": "length"}], "usage": USAGE}).encode()


def chat_stream(parallel: bool) -> list[bytes]:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini"}
    events: list[dict[str, Any]] = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                                          "finish_reason": None}]}]
    for k, call in enumerate(calls(parallel)):
        fn = call["function"]
        events.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": k, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}]},
            "finish_reason": None}]})
        for piece in (fn["arguments"][:5], fn["arguments"][5:]):
            events.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": k, "function": {"arguments": piece}}]}, "finish_reason": None}]})
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    events.append({**head, "choices": [], "usage": USAGE})
    return sse(*events)


def responses_body() -> bytes:
    return json.dumps({"id": "resp_1", "object": "response", "created_at": 1, "status": "incomplete",
                       "incomplete_details": {"reason": "max_output_tokens"}, "model": "gpt-4o-mini",
                       "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                                   "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
                                  {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                                   "name": "parts_stock", "arguments": CUT, "status": "incomplete"}],
                       "usage": {"input_tokens": 50, "output_tokens": 6, "total_tokens": 56}}).encode()


def responses_stream() -> list[bytes]:
    resp = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-4o-mini", "output": []}
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "parts_stock", "arguments": ""}
    done = {**resp, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "content": [
                {"type": "output_text", "text": "Checking.", "annotations": []}]}, {**item, "arguments": CUT}],
            "usage": {"input_tokens": 50, "output_tokens": 6, "total_tokens": 56}}
    return sse({"type": "response.created", "response": {**resp, "status": "in_progress"}},
               {"type": "response.output_item.added", "output_index": 0, "item": {
                   "type": "message", "id": "msg_1", "role": "assistant", "content": []}},
               {"type": "response.content_part.added", "output_index": 0, "content_index": 0, "item_id": "msg_1",
                "part": {"type": "output_text", "text": "", "annotations": []}},
               {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1",
                "delta": "Check"},
               {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1",
                "delta": "ing."},
               {"type": "response.output_item.added", "output_index": 1, "item": item},
               {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1",
                "delta": CUT[:6]},
               {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1",
                "delta": CUT[6:]},
               {"type": "response.incomplete", "response": done}, done=False)


def anthropic_body() -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                       "content": [{"type": "text", "text": "Let me check."},
                                   {"type": "tool_use", "id": "toolu_1", "name": "parts_stock",
                                    "input": {"ticket": "R-1"}}],
                       "stop_reason": "max_tokens", "stop_sequence": None, "usage": A_USAGE}).encode()


def anthropic_stream(pieces: tuple[str, ...]) -> list[bytes]:
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
           "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 50, "output_tokens": 1}}
    return sse({"type": "message_start", "message": msg},
               {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}},
               {"type": "content_block_stop", "index": 0},
               {"type": "content_block_start", "index": 1, "content_block": {
                   "type": "tool_use", "id": "toolu_1", "name": "parts_stock", "input": {}}},
               *({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                                       "partial_json": p}} for p in pieces),
               {"type": "content_block_stop", "index": 1},
               {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"output_tokens": 6}},
               {"type": "message_stop"}, anthropic=True)
