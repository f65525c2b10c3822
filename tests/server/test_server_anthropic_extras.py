"""The official ``anthropic`` SDK against the real server: stop reasons as the real API gives them, and
``messages.count_tokens``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from server_testkit import wait_rows
from testkit import RunningServer, start_server, stop_server

from llmtrace.backend.model.pull import default_model_path

SCHEMA = {"type": "object", "properties": {"priority": {"type": "string", "enum": ["low", "high"]}},
          "required": ["priority"], "additionalProperties": False}
MSG = [{"role": "user", "content": "Rate this ticket."}]


def _client(server) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The bundled SmolLM2 model, which ends its turns with ``<|im_end|>`` as chat models do."""
    path: Path = default_model_path()
    if not path.is_file():
        pytest.fail(f"default model missing at {path}: run `llmtrace model pull` (make setup does)")
    server = start_server(tmp_path_factory.mktemp("real-server"), "--served-model-name", "smol", model=str(path))
    try:
        yield server
    finally:
        stop_server(server)


def test_end_of_turn_token_is_end_turn(real_server: RunningServer) -> None:
    """The real model's own end (``<|im_end|>``) is end_turn with stop_sequence null, streamed and not."""
    client = _client(real_server)
    # a cap well above the answer: the greedy answer's length depends on the CPU's kernels (37 tokens on an
    # AVX2-only Zen 3, which takes torch's paths; under 30 where this test was written, at a cap of 30)
    ask = {"model": "smol", "max_tokens": 160, "messages": [{"role": "user", "content": "Say hello in one word."}],
           "extra_body": {"temperature": 0}}
    raw = client.messages.with_raw_response.create(**ask)  # type: ignore[arg-type]
    m = raw.parse()
    assert m.stop_reason == "end_turn" and m.stop_sequence is None, (m.stop_reason, m.stop_sequence)
    assert m.usage.output_tokens < 160
    with client.messages.stream(**ask) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert final.stop_reason == "end_turn" and final.stop_sequence is None
    rows = wait_rows(real_server.db_path, "SELECT attributes->>'llmtrace.stop.matched' FROM stages "
                     "WHERE trace_id = ? AND stage = 'gen.stop'", [raw.headers["x-llmtrace-trace-id"]])
    assert rows == [("<|im_end|>",)]  # the engine ended on the end-of-turn token, and the span says so


def test_natural_end_is_end_turn_not_a_stop_sequence(tiny_server) -> None:  # type: ignore[no-untyped-def]
    """Generation that ends on its own (here: the grammar is complete, the engine names what ended it)
    is end_turn with stop_sequence null, streamed and not; the engine's internal name stays in the span."""
    client = _client(tiny_server)
    raw = client.messages.with_raw_response.create(
        model="tiny", max_tokens=40, messages=MSG, output_config={"format": {"type": "json_schema", "schema": SCHEMA}})
    m = raw.parse()
    assert m.stop_reason == "end_turn" and m.stop_sequence is None, (m.stop_reason, m.stop_sequence)
    with client.messages.stream(model="tiny", max_tokens=40, messages=MSG,
                                output_config={"format": {"type": "json_schema", "schema": SCHEMA}}) as s:
        events = [ev for ev in s if ev.type == "message_delta"]
        final = s.get_final_message()
    assert final.stop_reason == "end_turn" and final.stop_sequence is None
    assert events and events[-1].delta.stop_sequence is None
    trace_id = raw.headers["x-llmtrace-trace-id"]
    rows = wait_rows(tiny_server.db_path, "SELECT attributes->>'llmtrace.stop.matched' FROM stages "
                     "WHERE trace_id = ? AND stage = 'gen.stop'", [trace_id])
    assert rows[0][0]  # what ended it is recorded for diagnosis, just not reported as a stop sequence


def test_stop_token_is_end_turn(tiny_server) -> None:  # type: ignore[no-untyped-def]
    """A stop *token* (what the end-of-turn token is to the engine) is end_turn; only stop strings the
    request sent are stop sequences."""
    client = _client(tiny_server)
    ask = {"model": "tiny", "max_tokens": 8, "messages": MSG}
    greedy = {"temperature": 0, "ignore_eos": True}
    full = client.messages.create(**ask, extra_body=greedy)
    assert full.stop_reason == "max_tokens" and full.stop_sequence is None
    # every token id below the vocabulary's end ends it at the first token: a stop token, not a string
    stop_ids = list(range(49152))
    m = client.messages.create(**ask, extra_body={**greedy, "stop_token_ids": stop_ids})
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.output_tokens == 1


def test_tool_use_and_max_tokens_stop_reasons(tiny_server) -> None:  # type: ignore[no-untyped-def]
    tools = [{"name": "lookup", "description": "look up a ticket",
              "input_schema": {"type": "object", "properties": {"id": {"type": "string", "enum": ["A1", "B2"]}},
                               "required": ["id"], "additionalProperties": False}}]
    client = _client(tiny_server)
    m = client.messages.create(model="tiny", max_tokens=60, messages=MSG, tools=tools,  # type: ignore[arg-type]
                               tool_choice={"type": "any"})
    assert m.stop_reason == "tool_use" and m.stop_sequence is None
    cut = client.messages.create(model="tiny", max_tokens=2, messages=MSG, extra_body={"ignore_eos": True})
    assert cut.stop_reason == "max_tokens" and cut.stop_sequence is None


def test_count_tokens_matches_the_messages_input(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    system = "You count tokens for a living; this system prompt is unique to the count test. " * 3
    ask = {"model": "tiny", "system": system, "messages": [*MSG, {"role": "assistant", "content": "Which one?"},
                                                           {"role": "user", "content": "The first, ticket 4711."}]}
    counted = client.messages.count_tokens(**ask)  # type: ignore[arg-type]
    assert type(counted).__name__ == "MessageTokensCount"
    m = client.messages.create(**ask, max_tokens=2)  # type: ignore[arg-type]
    total = m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == total, (counted.input_tokens, total)
    # the chat template counts: the bare words are fewer tokens than the rendered prompt
    bare = client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert 1 < bare.input_tokens < counted.input_tokens


def test_count_tokens_with_tools_and_errors(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    tools = [{"name": "lookup", "description": "look up a ticket by its id",
              "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}]
    plain = client.messages.count_tokens(model="tiny", messages=MSG)
    with_tools = client.messages.count_tokens(model="tiny", messages=MSG, tools=tools,  # type: ignore[arg-type]
                                              tool_choice={"type": "any"})
    m = client.messages.create(model="tiny", messages=MSG, tools=tools, tool_choice={"type": "any"},  # type: ignore[arg-type]
                               max_tokens=60)
    assert with_tools.input_tokens > plain.input_tokens
    assert with_tools.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    # a long prompt (counted on the intake worker thread) gives the same count as its messages call
    long_msg = [{"role": "user", "content": "tickets and more tickets " * 1400}]
    long_count = client.messages.count_tokens(model="tiny", messages=long_msg)  # type: ignore[arg-type]
    long_m = client.messages.create(model="tiny", messages=long_msg, max_tokens=1)  # type: ignore[arg-type]
    assert long_count.input_tokens == long_m.usage.input_tokens + (long_m.usage.cache_read_input_tokens or 0)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-99", messages=MSG)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": 5}])  # type: ignore[typeddict-item]
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.count_tokens(model="tiny", messages=[])
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
