"""The official ``anthropic`` SDK, unmodified, against the real server with the tiny model."""

from __future__ import annotations

import asyncio

import anthropic
import pytest


def _client(server) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


MSG = [{"role": "user", "content": "Say something short."}]


def test_messages_sync(tiny_server) -> None:  # type: ignore[no-untyped-def]
    raw = _client(tiny_server).messages.with_raw_response.create(
        model="tiny", max_tokens=6, system="You are terse.", messages=MSG, extra_body={"temperature": 0})
    assert len(raw.headers["x-llmtrace-trace-id"]) == 32
    m = raw.parse()
    assert m.type == "message" and m.role == "assistant" and m.model == "tiny"
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.content[0].type == "text"
    assert m.usage.input_tokens > 5 and m.usage.output_tokens >= 1
    assert m.usage.cache_read_input_tokens is not None


def test_messages_stream_events_and_text(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    kinds = []
    with client.messages.stream(model="tiny", max_tokens=7, messages=MSG,
                                extra_body={"ignore_eos": True}) as stream:
        for ev in stream:
            kinds.append(ev.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    for needed in ("content_block_start", "content_block_delta", "content_block_stop", "message_delta"):
        assert needed in kinds
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 7
    same = client.messages.create(model="tiny", max_tokens=7, messages=MSG,
                                  extra_body={"ignore_eos": True})
    assert same.content[0].text == final.content[0].text  # type: ignore[union-attr]


def test_messages_async(tiny_server) -> None:  # type: ignore[no-untyped-def]
    async def run() -> list[str | None]:
        client = anthropic.AsyncAnthropic(base_url=tiny_server.base_url, api_key="unused", max_retries=0)
        async with client:
            rs = await asyncio.gather(*[client.messages.create(
                model="tiny", max_tokens=4, messages=[{"role": "user", "content": f"n{i}"}]) for i in range(3)])
            async with client.messages.stream(model="tiny", max_tokens=3, messages=MSG) as s:
                msg = await s.get_final_message()
        return [r.stop_reason for r in rs] + [msg.stop_reason]

    assert all(r in ("end_turn", "max_tokens") for r in asyncio.run(run()))


def test_cache_read_excluded_from_input_tokens(tiny_server) -> None:  # type: ignore[no-untyped-def]
    system = "A long, stable system prompt that spans several KV blocks of the cache. " * 6
    client = _client(tiny_server)
    first = client.messages.create(model="tiny", max_tokens=2, system=system, messages=MSG)
    second = client.messages.create(model="tiny", max_tokens=2, system=system, messages=MSG)
    total = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    cached = second.usage.cache_read_input_tokens or 0
    assert cached >= 64, f"the repeated prompt should be read from cache, got {cached}"
    # Anthropic counts cached tokens outside input_tokens: the two add up to the whole prompt.
    assert second.usage.input_tokens + cached == total


def test_tool_use(tiny_server) -> None:  # type: ignore[no-untyped-def]
    tools = [{"name": "get_weather", "description": "weather for a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                               "required": ["city"], "additionalProperties": False}}]
    client = _client(tiny_server)
    m = client.messages.create(model="tiny", max_tokens=60, messages=MSG, tools=tools,  # type: ignore[arg-type]
                               tool_choice={"type": "any"})
    assert m.stop_reason == "tool_use"
    block = m.content[0]
    assert block.type == "tool_use" and block.name == "get_weather" and block.input["city"] in ("Paris", "Rome")
    with client.messages.stream(model="tiny", max_tokens=60, messages=MSG, tools=tools,  # type: ignore[arg-type]
                                tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].type == "tool_use"
    assert final.content[0].input["city"] in ("Paris", "Rome")  # type: ignore[union-attr]
    # the tool result goes back in and the model answers
    follow = client.messages.create(model="tiny", max_tokens=4, tools=tools, messages=[  # type: ignore[arg-type]
        *MSG, {"role": "assistant", "content": [block.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}]}],
        tool_choice={"type": "none"})
    assert follow.stop_reason in ("end_turn", "max_tokens")


def test_errors_in_anthropic_shape(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    with pytest.raises(anthropic.NotFoundError) as nf:
        client.messages.create(model="claude-99", max_tokens=5, messages=MSG)
    assert nf.value.body["type"] == "error" and nf.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="tiny", max_tokens=5, messages=MSG, extra_body={"temperature": -2})
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def test_structured_output_json_schema(tiny_server) -> None:  # type: ignore[no-untyped-def]
    import json

    schema = {"type": "object", "properties": {"priority": {"type": "string", "enum": ["low", "high"]}},
              "required": ["priority"], "additionalProperties": False}
    m = _client(tiny_server).messages.create(model="tiny", max_tokens=40, messages=MSG,
                                             output_config={"format": {"type": "json_schema", "schema": schema}})
    assert json.loads(m.content[0].text)["priority"] in ("low", "high")  # type: ignore[union-attr]


def test_stop_sequence_is_named(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    ask = {"model": "tiny", "max_tokens": 12, "messages": MSG, "extra_body": {"temperature": 0, "ignore_eos": True}}
    full = client.messages.create(**ask).content[0].text
    stop = full[1:3]  # greedy: the same request produces the same text, so this will be met
    assert len(stop) == 2, full
    m = client.messages.create(**ask, stop_sequences=[stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert stop not in m.content[0].text
    plain = client.messages.create(**{**ask, "max_tokens": 3})
    assert plain.stop_reason == "max_tokens" and plain.stop_sequence is None
