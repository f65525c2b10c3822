"""Server parts that need no HTTP: normalization, admission, routing, the tool gate, request parsing."""

from __future__ import annotations

import asyncio

import pytest

from llmtrace.backend.server.admission import Admission, Shed
from llmtrace.backend.server.anthropic_protocol import parse_messages
from llmtrace.backend.server.errors import APIError
from llmtrace.backend.server.normalization import NormalizationPolicy
from llmtrace.backend.server.openai_protocol import parse_chat, parse_completions
from llmtrace.backend.server.routing import ModelRouter
from llmtrace.backend.server.tool_gate import ToolGate


def test_normalization_counts_and_changes() -> None:
    text = "caf\u0065\u0301 \u200bpay\u00a0now \uff21 pаypal"  # combining accent, ZWSP, NBSP, fullwidth A, Cyrillic а
    out, c = NormalizationPolicy("nfkc", strip_invisible=True).apply(text)
    assert "\u200b" not in out and "\u0301" not in out and "\uff21" not in out and "A" in out
    assert c.invisible_chars == 1 and c.nbsp == 1 and c.confusables == 1
    assert c.chars_changed >= 3
    kept, c2 = NormalizationPolicy("none", strip_invisible=False).apply(text)
    assert kept == text and c2.chars_changed == 0 and c2.invisible_chars == 1
    plain_russian = "привет мир"
    assert NormalizationPolicy("nfc").apply(plain_russian)[1].confusables == 0
    with pytest.raises(ValueError):
        NormalizationPolicy("nfd")  # type: ignore[arg-type]


def test_admission_queues_in_order_and_sheds() -> None:
    async def scenario() -> None:
        a = Admission(max_running=1, max_queued=1)
        first = await a.acquire()
        assert first.decision == "admitted" and a.running == 1
        waiter = asyncio.ensure_future(a.acquire())
        await asyncio.sleep(0)
        assert a.queued == 1
        with pytest.raises(Shed) as shed:
            await a.acquire()
        assert shed.value.retry_after_s >= 1
        a.release(0.5)
        ticket = await waiter
        assert ticket.decision == "queued" and ticket.queue_wait_ms >= 0 and ticket.queue_depth == 0
        assert a.running == 1 and a.queued == 0
        # A waiter cancelled while queued leaves no trace and takes no slot.
        w2 = asyncio.ensure_future(a.acquire())
        await asyncio.sleep(0)
        w2.cancel()
        await asyncio.sleep(0)
        assert a.queued == 0
        a.release()
        assert a.running == 0

    asyncio.run(scenario())


def test_router_aliases_default_and_unknown() -> None:
    r = ModelRouter(["smol"], {"gpt-4o-mini": "smol"})
    assert r.route("smol").rule == "exact"
    assert r.route("gpt-4o-mini").model == "smol" and r.route("gpt-4o-mini").rule == "alias"
    assert r.route(None).rule == "default"
    with pytest.raises(APIError) as err:
        r.route("llama-70b")
    assert err.value.status == 404 and "smol" in err.value.message and "gpt-4o-mini" in err.value.message
    with pytest.raises(ValueError):
        ModelRouter(["smol"], {"x": "missing"})


def test_tool_gate_holds_calls_and_passes_text() -> None:
    g = ToolGate(True)
    assert g.feed("  ") == "" and g.feed('{"na') == "" and g.release() == '  {"na'
    g2 = ToolGate(True)
    assert g2.feed(" ") == "" and g2.feed("Hi") == " Hi" and g2.feed(" there") == " there"
    assert ToolGate(False).feed("{") == "{"


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5}, "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": "hello"}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": 5}, "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}, "response_format"),
])
def test_openai_parse_errors_name_the_field(body: dict, param: str) -> None:
    with pytest.raises(APIError) as err:
        parse_chat(body)
    assert err.value.status == 400 and err.value.param == param


def test_openai_parse_accepts_vllm_extras() -> None:
    job = parse_chat({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
                                                 {"role": "user", "content": "x"}],
                      "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.1, "ignore_eos": True,
                      "stop_token_ids": [2], "seed": 7, "max_completion_tokens": 9, "stream": True,
                      "stream_options": {"include_usage": True}})
    p = job.params
    assert (p.top_k, p.min_p, p.repetition_penalty, p.ignore_eos, p.stop_token_ids, p.seed, p.max_tokens) == \
        (0, 0.1, 1.1, True, (2,), 7, 9)
    assert job.messages is not None and job.messages[0]["role"] == "system"
    assert job.stream and job.include_usage
    comp = parse_completions({"prompt": ["hi"], "max_tokens": 3})
    assert comp.prompt == "hi" and comp.params.max_tokens == 3


def test_anthropic_parse_blocks_and_tools() -> None:
    job = parse_messages({
        "model": "m", "max_tokens": 20, "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get", "input": {"c": "P"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
        ],
        "tools": [{"name": "get", "input_schema": {"type": "object", "properties": {"c": {"type": "string"}}}}],
        "tool_choice": {"type": "any"}, "stop_sequences": ["END"],
    })
    roles = [m["role"] for m in job.messages or []]
    assert roles == ["system", "user", "assistant", "tool"]
    assert job.messages is not None and job.messages[2]["tool_calls"][0]["function"]["name"] == "get"
    assert job.output_type == "tool_calls" and job.params.stop == ("END",) and job.params.max_tokens == 20
    with pytest.raises(APIError):
        parse_messages({"model": "m", "messages": [{"role": "user", "content": "x"}]})  # no max_tokens
