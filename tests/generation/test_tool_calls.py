"""Tool calls through constrained JSON: the constraint, the parse, finish_reason "tool_calls"."""

from __future__ import annotations

import json
import time

import pytest
import torch
from generation_helpers import run_random

from llmtrace.backend.generation.params import InvalidRequestError, SamplingParams
from llmtrace.backend.generation.tool_calls import (
    describe_tools,
    parse_tool_calls,
    tool_call_constraint,
    tool_call_message_content,
)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                        "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                      "required": ["a", "b"], "additionalProperties": False}}},
]


def check_call(call):
    assert call["type"] == "function" and call["id"].startswith("call_")
    name = call["function"]["name"]
    args = json.loads(call["function"]["arguments"])
    if name == "get_weather":
        assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f")
    else:
        assert name == "add" and set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    return name


@pytest.mark.parametrize("seed", range(3))
def test_required_call_is_valid_and_finishes_with_tool_calls(pipe, seed):
    c = tool_call_constraint(TOOLS, "required")
    st = run_random(pipe, SamplingParams(seed=seed, max_tokens=120, constraint=c), [1], seed=seed)
    assert st.finish_reason == "tool_calls", st.text
    assert len(st.tool_calls) == 1
    check_call(st.tool_calls[0])
    assert pipe.stage_values(st)["gen.stop"]["gen_ai.response.finish_reasons"] == ["tool_calls"]


def test_named_tool_choice(pipe):
    c = tool_call_constraint(TOOLS, {"type": "function", "function": {"name": "add"}})
    st = run_random(pipe, SamplingParams(seed=1, max_tokens=120, constraint=c), [1])
    assert st.finish_reason == "tool_calls" and check_call(st.tool_calls[0]) == "add"


def _drive(pipe, tokenizer, constraint, forced_text):
    """The 'model' starts with forced_text, then random logits decide under the constraint."""
    st = pipe.new_state(SamplingParams(seed=0, max_tokens=120, constraint=constraint), [1])
    for tok in tokenizer.encode(forced_text):
        pipe.accept(st, tok, time.time_ns())
    g = torch.Generator().manual_seed(0)
    while not st.finished:
        pipe.accept(st, pipe.sample(torch.randn(1, pipe.vocab_size, generator=g) * 3, [st])[0], time.time_ns())
    return st


def test_auto_allows_plain_text_or_a_call(pipe, tokenizer):
    c = tool_call_constraint(TOOLS, "auto")
    text = _drive(pipe, tokenizer, c, "Sure, here")
    assert text.text.startswith("Sure, here") and text.tool_calls == []
    assert text.finish_reason in ("stop", "length")
    call = _drive(pipe, tokenizer, c, '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}')
    assert call.finish_reason == "tool_calls"
    assert json.loads(call.tool_calls[0]["function"]["arguments"]) == {"city": "Paris", "unit": "c"}


def test_none_and_invalid_choices():
    assert tool_call_constraint(TOOLS, "none") is None
    with pytest.raises(InvalidRequestError):
        tool_call_constraint(TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(InvalidRequestError):
        tool_call_constraint(TOOLS, "sometimes")
    with pytest.raises(InvalidRequestError):
        tool_call_constraint([{"type": "function"}], "auto")


def test_parse_and_write_back():
    assert parse_tool_calls("plain words") == []
    assert parse_tool_calls("{broken") == []
    calls = parse_tool_calls('[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {}}]')
    assert [c["function"]["name"] for c in calls] == ["add", "get_weather"]
    assert json.loads(tool_call_message_content(calls[:1])) == {"name": "add", "arguments": {"a": 1, "b": 2}}
    prompt = describe_tools(TOOLS)
    assert "get_weather" in prompt and '"name": <tool name>' in prompt


def test_tools_reach_a_template_without_tool_support(tokenizer):
    msgs = [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
    ]
    prompt = tokenizer.apply_chat_template(msgs, tools=TOOLS)
    assert "get_weather" in prompt.split("<|im_start|>user")[0]  # described in the system turn
    assert '<|im_start|>assistant\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}<|im_end|>' in prompt
    assert "<|im_start|>tool\n21C<|im_end|>" in prompt
