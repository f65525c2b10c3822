"""SSE splitting, the OpenAI and Anthropic parsers, usage normalisation and prompt segments, on byte
streams written by hand in the providers' wire formats."""

from __future__ import annotations

import json

import pytest
from adapters_fake_provider import sse
from hypothesis import given, settings
from hypothesis import strategies as st

from llmtrace.adapters.middleware.anthropic_parser import AnthropicParser
from llmtrace.adapters.middleware.openai_parser import OpenAIParser
from llmtrace.adapters.middleware.protocol import parser_for
from llmtrace.adapters.middleware.sse import SSEParser
from llmtrace.tracer import capture
from llmtrace.tracer.reading.segments import capture_attributes
from llmtrace.tracer.record import usage

OPENAI_STREAM = sse(
    {
        "id": "c1",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    },
    {"id": "c1", "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "delta": {"content": "Hé"}}]},
    {
        "id": "c1",
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q"'},
                        }
                    ]
                },
            }
        ],
    },
    {
        "id": "c1",
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                "finish_reason": "tool_calls",
            }
        ],
    },
    {
        "id": "c1",
        "model": "gpt-4o-2024-08-06",
        "choices": [],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 7,
            "total_tokens": 107,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    },
)

ANTHROPIC_STREAM = sse(
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-sonnet-4-20250514",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 90,
                "cache_creation_input_tokens": 0,
                "output_tokens": 1,
            },
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "tu_1", "name": "lookup"},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"q": 1}'},
    },
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 12},
    },
    {"type": "message_stop"},
    anthropic=True,
)


def _events(chunks: list[bytes]) -> list[tuple[bytes | None, bytes]]:
    p = SSEParser()
    out = []
    for c in chunks:
        out.extend(p.feed(c))
    return out + p.flush()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=12), st.booleans())
def test_sse_events_do_not_depend_on_how_the_bytes_are_split(cuts: list[int], crlf: bool) -> None:
    raw = b"".join(sse({"a": 1}, {"b": "x\u00e9y"}, {"type": "ping"}, anthropic=False, crlf=crlf))
    raw = b": keep-alive comment\n\n" + raw if not crlf else raw
    bounds = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *bounds], [*bounds, len(raw)], strict=True)]
    assert _events(pieces) == _events([raw])
    assert [d for _, d in _events([raw])] == [
        b'{"a": 1}',
        b'{"b": "x\\u00e9y"}',
        b'{"type": "ping"}',
        b"[DONE]",
    ]


def test_sse_multiline_data_event_names_and_a_final_event_without_blank_line() -> None:
    p = SSEParser()
    assert p.feed(b"event: delta\ndata: one\ndata: two\nid: 7\n\n") == [(b"delta", b"one\ntwo")]
    assert p.feed(b"data: tail") == []
    assert p.flush() == [(None, b"tail")]
    cr = SSEParser()  # a CRLF split between reads must not make an empty event boundary
    assert cr.feed(b"data: a\r") == []
    assert cr.feed(b"\n\r\ndata: b\r\n\r\n") == [(None, b"a"), (None, b"b")]


def test_openai_parser_reads_content_tool_calls_finish_and_usage() -> None:
    p = OpenAIParser()
    p.on_request(
        {
            "model": "gpt-4o",
            "stream": True,
            "temperature": 0.2,
            "top_p": 0.9,
            "seed": 7,
            "max_tokens": 64,
            "presence_penalty": 0.5,
            "stop": "END",
            "response_format": {"type": "json_object"},
            "tools": [{"type": "function", "function": {"name": "lookup"}}],
            "messages": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "u1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": [{"type": "text", "text": "u2"}]},
            ],
        }
    )
    o = p.obs
    assert (o.model, o.stream, o.temperature, o.top_p, o.seed, o.max_tokens) == (
        "gpt-4o",
        True,
        0.2,
        0.9,
        7,
        64,
    )
    assert o.stop == ["END"] and o.output_type == "json" and o.tools == 1 and o.system_text == "S"
    assert [k for k, _ in o.segments] == ["tools", "system", "history:user", "history:assistant", "user"]
    for t, ev in enumerate(_events(OPENAI_STREAM), start=1):
        p.on_chunk(ev[0], ev[1], t)
    assert o.first_chunk_ns == 1 and o.first_content_ns == 2 and o.first_tool_ns == 3
    assert o.output_text == 'Hé{"q": 1}' and o.tool_calls == 1 and o.finish_reasons == ["tool_calls"]
    assert o.response_model == "gpt-4o-2024-08-06" and o.done
    u = usage.from_openai(o.usage_raw or {})
    assert (u.input_tokens, u.cache_read_tokens, u.uncached_tokens, u.output_tokens) == (100, 64, 36, 7)
    assert u.consistent and u.hit_rate == 0.64


def test_anthropic_parser_merges_the_two_halves_of_usage() -> None:
    p = AnthropicParser()
    p.on_request(
        {
            "model": "claude-sonnet-4",
            "max_tokens": 50,
            "system": [{"type": "text", "text": "Sys"}],
            "stop_sequences": ["###"],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "q"}],
        }
    )
    assert p.obs.system_text == "Sys" and p.obs.reasoning_budget == 1024 and p.obs.stop == ["###"]
    for t, ev in enumerate(_events(ANTHROPIC_STREAM), start=1):
        p.on_chunk(ev[0], ev[1], t)
    o = p.obs
    assert o.first_content_ns == 4 and o.first_tool_ns == 6 and o.tool_calls == 1
    assert o.finish_reasons == ["tool_use"] and o.done and o.response_id == "msg_1"
    u = usage.from_anthropic(o.usage_raw or {})
    # Anthropic adds cache reads beside input_tokens: normalised input is the sum.
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.consistent) == (100, 90, 12, True)
    assert u.attributes()["llmtrace.usage.raw.input_tokens"] == 10


def test_non_streamed_bodies_and_error_bodies() -> None:
    p = OpenAIParser()
    p.on_response(
        json.dumps(
            {
                "id": "x",
                "model": "m",
                "choices": [{"message": {"content": "hi"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        ).encode()
    )
    assert p.obs.output_text == "hi" and p.obs.finish_reasons == ["length"] and p.obs.done
    e = AnthropicParser()
    e.on_response(b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}')
    assert (e.obs.error_type, e.obs.error_message, e.obs.done) == ("overloaded_error", "busy", False)
    bad = OpenAIParser()
    bad.on_chunk(None, b"{not json", 1)  # skipped and noted, never raised
    assert bad.obs.error_type == "malformed_event"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 11}},
            "cached tokens exceed input tokens",
        ),
        ({"prompt_tokens": -1, "completion_tokens": 2}, "negative input_tokens"),
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 99},
            "total tokens differ from input plus output",
        ),
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
            "reasoning tokens exceed output tokens",
        ),
    ],
)
def test_impossible_openai_totals_are_flagged_not_fixed(raw: dict[str, object], problem: str) -> None:
    u = usage.from_openai(raw)
    assert not u.consistent and problem in u.problems
    assert u.hit_rate is None  # no rate is computed from numbers that cannot be true
    assert u.attributes()["llmtrace.meters.usage_consistent"] is False


def test_impossible_anthropic_totals_are_flagged() -> None:
    u = usage.from_anthropic({"input_tokens": 5, "cache_read_input_tokens": -3, "output_tokens": 1})
    assert not u.consistent and "negative cache_read_input_tokens" in u.problems


def test_parser_choice_by_path() -> None:
    assert isinstance(parser_for("POST", "/v1/chat/completions"), OpenAIParser)
    assert isinstance(parser_for("POST", "/v1/messages"), AnthropicParser)
    assert parser_for("POST", "/v1/completions").operation == "text_completion"  # type: ignore[union-attr]
    assert parser_for("GET", "/v1/models") is None and parser_for("POST", "/v1/messages/count_tokens") is None


def test_segments_under_each_capture_mode() -> None:
    segs = [
        ("system", "You are helpful. Today is 2026-11-29."),
        ("user", "my key is sk-abcdefghijklmnopqrstuvwx"),
    ]
    try:
        capture.set_mode("none")
        assert capture_attributes(segs, "out") == {}
        capture.set_mode("hashes")
        attrs = capture_attributes(segs, "out")
        records = json.loads(str(attrs["llmtrace.prompt.segments"]))
        assert [r["kind"] for r in records] == ["system", "user"] and records[0]["chars"] == len(segs[0][1])
        assert records[0]["chunk_hashes"] == capture.chunk_hash_chain(segs[0][1], 64)
        assert "llmtrace.prompt.text" not in attrs and "sk-abc" not in json.dumps(attrs)
        capture.set_mode("full")
        full = capture_attributes(segs, "out")
        assert capture.REDACTED_MARKER.search(str(full["llmtrace.prompt.text"])) and "sk-abc" not in str(
            full["llmtrace.prompt.text"]
        )
        assert (
            full["llmtrace.output.text"] == "out"
            and full["llmtrace.prompt.hash"] == attrs["llmtrace.prompt.hash"]
        )
    finally:
        capture.set_mode("hashes")


def test_responses_parser_maps_status_to_finish_reasons() -> None:
    from llmtrace.adapters.middleware.responses_parser import ResponsesParser

    cut = ResponsesParser()
    cut.on_request(
        {
            "model": "o4-mini",
            "input": [
                {"role": "developer", "content": "Rules."},
                {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
            ],
            "text": {"format": {"type": "json_schema"}},
        }
    )
    assert cut.obs.system_text == "Rules." and [k for k, _ in cut.obs.segments] == ["system", "user"]
    assert cut.obs.output_type == "json"
    cut.on_response(
        json.dumps(
            {
                "object": "response",
                "status": "incomplete",
                "output": [],
                "incomplete_details": {"reason": "max_output_tokens"},
            }
        ).encode()
    )
    assert cut.obs.finish_reasons == ["length"]
    call = ResponsesParser()
    call.on_chunk(
        b"response.output_item.added",
        b'{"type": "response.output_item.added", "item": {"type": "function_call"}}',
        1,
    )
    call.on_chunk(None, b'{"type": "response.function_call_arguments.delta", "delta": "{}"}', 2)
    call.on_chunk(None, b'{"type": "response.completed", "response": {"status": "completed"}}', 3)
    assert (call.obs.finish_reasons, call.obs.first_tool_ns, call.obs.tool_calls, call.obs.done) == (
        ["tool_calls"],
        2,
        1,
        True,
    )
    u = usage.normalise(
        "openai_responses",
        {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 12}, "output_tokens": 1},
    )
    assert not u.consistent and "cached tokens exceed input tokens" in u.problems
