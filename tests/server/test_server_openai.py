"""The official ``openai`` SDK, unmodified, against the real server with the tiny model."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest


def _client(server, **kw) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, **kw)


MSG = [{"role": "user", "content": "Say something short."}]


def test_models_list_names_the_served_model(tiny_server) -> None:  # type: ignore[no-untyped-def]
    ids = [m.id for m in _client(tiny_server).models.list().data]
    assert "tiny" in ids


def test_chat_sync_usage_and_trace_header(tiny_server) -> None:  # type: ignore[no-untyped-def]
    raw = _client(tiny_server).chat.completions.with_raw_response.create(
        model="tiny", messages=MSG, max_tokens=6, temperature=0)
    assert len(raw.headers["x-llmtrace-trace-id"]) == 32
    r = raw.parse()
    assert r.object == "chat.completion" and r.model == "tiny"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 5
    assert r.usage.prompt_tokens_details is not None and r.usage.prompt_tokens_details.cached_tokens >= 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_with_include_usage(tiny_server) -> None:  # type: ignore[no-untyped-def]
    chunks = list(_client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, max_tokens=8, stream=True, stream_options={"include_usage": True},
        temperature=0, extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    nonstream = _client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert nonstream.choices[0].message.content == text  # greedy: same text streamed or not


def test_chat_async_concurrent(tiny_server) -> None:  # type: ignore[no-untyped-def]
    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{tiny_server.base_url}/v1", api_key="unused", max_retries=0)
        async with client:
            rs = await asyncio.gather(*[client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": f"number {i}"}], max_tokens=4)
                for i in range(4)])
            stream = await client.chat.completions.create(model="tiny", messages=MSG, max_tokens=4, stream=True)
            parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        return [r.choices[0].finish_reason for r in rs] + ["".join(parts)]

    out = asyncio.run(run())
    assert all(f in ("stop", "length") for f in out[:4])


def test_completions_endpoint(tiny_server) -> None:  # type: ignore[no-untyped-def]
    c = _client(tiny_server)
    r = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=5, extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.usage is not None and r.usage.completion_tokens == 5
    streamed = list(c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=5, stream=True,
                                         temperature=0, extra_body={"ignore_eos": True}))
    assert streamed[-1].choices[0].finish_reason == "length"


def test_repeated_prompt_reports_cached_tokens(tiny_server) -> None:  # type: ignore[no-untyped-def]
    long_user = "Here is a long, stable preamble that fills several KV blocks. " * 6
    msgs = [{"role": "system", "content": long_user}, {"role": "user", "content": "and a question"}]
    c = _client(tiny_server)
    first = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=2)
    second = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=2)
    assert first.usage is not None and second.usage is not None
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached >= 64, f"second identical prompt should hit the prefix cache, got {cached} cached"
    assert cached < second.usage.prompt_tokens


def test_json_schema_response_format_parses(tiny_server) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "confidence": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    r = _client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, max_tokens=60, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}})
    data = json.loads(r.choices[0].message.content or "")
    assert data["answer"] in ("yes", "no") and 0 <= data["confidence"] <= 9


def test_tool_call_required(tiny_server) -> None:  # type: ignore[no-untyped-def]
    tools = [{"type": "function", "function": {
        "name": "lookup_order", "description": "find an order",
        "parameters": {"type": "object", "properties": {"status": {"type": "string", "enum": ["open", "closed"]}},
                       "required": ["status"], "additionalProperties": False}}}]
    c = _client(tiny_server)
    r = c.chat.completions.create(model="tiny", messages=MSG, tools=tools, tool_choice="required", max_tokens=60)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "lookup_order"
    assert json.loads(call.function.arguments)["status"] in ("open", "closed")
    # streamed: the call arrives as tool_calls deltas, no JSON leaks into content
    chunks = list(c.chat.completions.create(model="tiny", messages=MSG, tools=tools, tool_choice="required",
                                            max_tokens=60, stream=True))
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert content == "" and calls and calls[0].function.name == "lookup_order"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_unknown_model_is_404_listing_models(tiny_server) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.NotFoundError) as err:
        _client(tiny_server).chat.completions.create(model="gpt-17", messages=MSG)
    assert "tiny" in str(err.value)


def test_invalid_sampling_values_are_400(tiny_server) -> None:  # type: ignore[no-untyped-def]
    c = _client(tiny_server)
    for kwargs in ({"temperature": -1}, {"top_p": 0}, {"extra_body": {"top_k": -5}}, {"presence_penalty": 9}):
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(model="tiny", messages=MSG, **kwargs)  # type: ignore[arg-type]
        body = err.value.body
        assert isinstance(body, dict) and body.get("param"), body


def test_chat_logprobs_match_the_tokens_and_rank_the_greedy_choice_first(tiny_server) -> None:  # type: ignore[no-untyped-def]
    r = _client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3,
        extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert r.usage is not None and len(content) == r.usage.completion_tokens == 5
    for item in content:
        assert item.logprob <= 0.0 and len(item.top_logprobs) == 3
        ranked = [t.logprob for t in item.top_logprobs]
        assert ranked == sorted(ranked, reverse=True)
        assert item.top_logprobs[0].token == item.token and item.top_logprobs[0].logprob == item.logprob  # greedy
    text = r.choices[0].message.content or ""
    if "\ufffd" not in text:  # the tokens' bytes are the answer's bytes
        assert b"".join(bytes(item.bytes or []) for item in content).decode() == text


def test_streamed_logprobs_cover_every_token_once(tiny_server) -> None:  # type: ignore[no-untyped-def]
    chunks = list(_client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, max_tokens=7, temperature=0, logprobs=True, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    items = [it for c in chunks if c.choices and c.choices[0].logprobs for it in c.choices[0].logprobs.content]
    assert chunks[-1].usage is not None and len(items) == chunks[-1].usage.completion_tokens == 7
    assert all(it.top_logprobs == [] for it in items)  # none asked for
    plain = _client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, max_tokens=3, temperature=0, extra_body={"ignore_eos": True})
    assert plain.choices[0].logprobs is None  # not asked for: not computed, not sent


def test_completions_logprobs_in_the_legacy_shape(tiny_server) -> None:  # type: ignore[no-untyped-def]
    r = _client(tiny_server).completions.create(model="tiny", prompt="Once upon a time", max_tokens=4,
                                                temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert all(v <= 0.0 for v in lp.token_logprobs) and all(1 <= len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
