"""The real openai and anthropic SDKs, instrumented, against the real ``llmtrace serve`` (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from adapters_store import client_pass, rows, stages_of, wait_for
from adapters_tools import WEATHER_TOOL

from llmtrace.adapters import instrument, is_instrumented, uninstrument
from llmtrace.adapters.helpers.loops import Tools, as_tool_call
from llmtrace.adapters.middleware.transport import AsyncInstrumentedTransport, InstrumentedTransport

SYSTEM = "You are a support agent. Current time: 2026-11-29T10:15:00Z. Answer briefly."
MSGS = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is my parcel?"}]


def _openai(server: Any, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=f"{server.base_url}/v1", max_retries=0, **kw)


def _anthropic(server: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0)


def test_openai_sync_call_records_summary_and_client_stages(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    r = client.chat.completions.create(
        model="tiny", messages=MSGS, max_tokens=8, temperature=0.0, seed=3, frequency_penalty=0.1
    )
    p = client_pass(traced)
    assert (p["model"], p["response_model"], p["provider"], p["status"]) == ("tiny", r.model, "openai", "ok")
    assert (p["prompt_tokens"], p["output_tokens"]) == (r.usage.prompt_tokens, r.usage.completion_tokens)
    assert p["finish_reason"] == r.choices[0].finish_reason
    assert (p["temperature"], p["seed"], p["max_tokens"], p["cost_usd"]) == (0.0, 3, 8, 0.0)
    assert p["ttft_ms"] is None  # a buffered answer shows no first token; nothing is made up
    st = stages_of(traced, p["span_id"])
    conn = st["arrival.connection"]["attributes"]
    assert conn["llmtrace.connection.reused"] is False and conn["llmtrace.connection.connect_ms"] >= 0
    assert conn["server.port"] == tiny_server.port
    assert st["arrival.stream_setup"]["attributes"]["llmtrace.stream.protocol"] == "none"
    sp = st["intake.system_prompt"]["attributes"]
    assert sp["llmtrace.system.volatile_kind"] == "timestamp"
    assert sp["llmtrace.system.volatile_offset"] == SYSTEM.index("2026")
    assert st["gen.sampling"]["attributes"]["llmtrace.sampling.greedy"] is True
    assert st["gen.penalties"]["attributes"]["gen_ai.request.frequency_penalty"] == 0.1
    acct = st["meters.cache_accounting"]["attributes"]
    assert acct["llmtrace.meters.usage_consistent"] is True
    assert (
        acct["llmtrace.meters.uncached_tokens"] + acct["llmtrace.meters.cached_tokens"]
        == r.usage.prompt_tokens
    )
    # The bundled backend names its own pass span in a response header and records the engine stages
    # itself, so the client marks nothing unobserved (a hosted provider gets them marked: see fault tests).
    assert p["attributes"]["llmtrace.server.span_id"]
    assert (
        not any(k.startswith("forward.") for k in st) and "llmtrace.unobserved_stages" not in p["attributes"]
    )
    segs = json.loads(p["attributes"]["llmtrace.prompt.segments"])
    assert [s["kind"] for s in segs] == ["system", "user"] and "llmtrace.prompt.text" not in p["attributes"]
    # The second call on the same client rides the pooled connection.
    client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
    second = rows(traced, "SELECT span_id FROM requests WHERE side='client' ORDER BY start_ns")[1]["span_id"]
    assert stages_of(traced, second)["arrival.connection"]["attributes"]["llmtrace.connection.reused"] is True


def test_openai_stream_timings_and_chunk_count(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    stream = client.chat.completions.create(
        model="tiny", messages=MSGS, max_tokens=24, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    p = client_pass(traced)
    usage = chunks[-1].usage
    assert p["status"] == "ok" and p["output_tokens"] == usage.completion_tokens
    st = stages_of(traced, p["span_id"])["gen.streaming"]["attributes"]
    assert st["llmtrace.stream.chunks"] == len(chunks)
    assert 0 < st["llmtrace.stream.first_byte_ms"] <= st["llmtrace.stream.first_content_ms"]
    assert st["llmtrace.stream.itl_p50_ms"] <= st["llmtrace.stream.itl_p99_ms"]
    assert p["ttft_ms"] == st["llmtrace.stream.first_content_ms"] and p["tpot_ms"] > 0
    assert (
        stages_of(traced, p["span_id"])["arrival.stream_setup"]["attributes"]["llmtrace.stream.protocol"]
        == "sse"
    )


def test_anthropic_sync_and_stream_normalise_usage(tiny_server: Any, traced: Path) -> None:
    client = instrument(_anthropic(tiny_server))
    m = client.messages.create(
        model="tiny", max_tokens=6, system="Be brief.", messages=[{"role": "user", "content": "hello"}]
    )
    with client.messages.stream(
        model="tiny", max_tokens=6, messages=[{"role": "user", "content": "hello"}]
    ) as s:
        text = s.get_final_text()
        final = s.get_final_message()
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert [p["provider"] for p in passes] == ["anthropic", "anthropic"]
    u = m.usage
    expected_in = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    assert passes[0]["prompt_tokens"] == expected_in and passes[0]["finish_reason"] == m.stop_reason
    assert passes[0]["attributes"]["llmtrace.usage.raw.input_tokens"] == u.input_tokens
    assert passes[1]["output_tokens"] == final.usage.output_tokens and passes[1]["status"] == "ok"
    stream_stage = stages_of(traced, passes[1]["span_id"])["gen.streaming"]["attributes"]
    assert stream_stage["llmtrace.stream.content_chunks"] >= (1 if text else 0)


async def test_async_clients_stream_and_not(tiny_server: Any, traced: Path) -> None:
    oc = instrument(
        openai.AsyncOpenAI(api_key="sk-test", base_url=f"{tiny_server.base_url}/v1", max_retries=0)
    )
    ac = instrument(anthropic.AsyncAnthropic(api_key="test", base_url=tiny_server.base_url, max_retries=0))
    assert isinstance(oc._client._transport, AsyncInstrumentedTransport)
    r = await oc.chat.completions.create(model="tiny", messages=MSGS, max_tokens=4)
    n = 0
    async for _ in await oc.chat.completions.create(model="tiny", messages=MSGS, max_tokens=4, stream=True):
        n += 1
    m = await ac.messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    async with ac.messages.stream(
        model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        await s.get_final_message()
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert [(p["provider"], p["status"]) for p in passes] == [("openai", "ok")] * 2 + [
        ("anthropic", "ok")
    ] * 2
    assert (
        passes[0]["output_tokens"] == r.usage.completion_tokens
        and passes[2]["output_tokens"] == m.usage.output_tokens
    )
    assert (
        stages_of(traced, passes[1]["span_id"])["gen.streaming"]["attributes"]["llmtrace.stream.chunks"] == n
    )
    await oc.close()
    await ac.close()


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_call_and_dispatch(tiny_server: Any, traced: Path, stream: bool) -> None:
    client = instrument(_openai(tiny_server))
    kw: dict[str, Any] = dict(
        model="tiny",
        max_tokens=40,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    )
    if stream:
        calls: dict[int, dict[str, str]] = {}
        finish = None
        for ch in client.chat.completions.create(stream=True, **kw):
            for d in ch.choices[0].delta.tool_calls or [] if ch.choices else []:
                c = calls.setdefault(d.index, {"name": "", "arguments": "", "id": ""})
                c["name"] += (d.function.name or "") if d.function else ""
                c["arguments"] += (d.function.arguments or "") if d.function else ""
                c["id"] = d.id or c["id"]
            if ch.choices and ch.choices[0].finish_reason:
                finish = ch.choices[0].finish_reason
        call = {
            "id": calls[0]["id"],
            "function": {"name": calls[0]["name"], "arguments": calls[0]["arguments"]},
        }
    else:
        r = client.chat.completions.create(**kw)
        finish, call = r.choices[0].finish_reason, r.choices[0].message.tool_calls[0]
    p = client_pass(traced)
    assert p["finish_reason"] == finish == "tool_calls"
    if stream:
        st = stages_of(traced, p["span_id"])["gen.streaming"]["attributes"]
        assert st["llmtrace.stream.first_tool_call_ms"] > 0 and "llmtrace.stream.first_content_ms" not in st
    tools = Tools()
    tools.register(lambda city: f"sunny in {city}", name="get_weather")
    tc = as_tool_call(call)
    assert tc.name == "get_weather" and "city" in tc.arguments
    assert tools.dispatch(call).startswith("sunny in")
    tool_span = rows(traced, "SELECT * FROM spans WHERE name = 'execute_tool get_weather'")[0]
    assert (
        tool_span["attributes"]["gen_ai.tool.call.id"] == tc.id and tool_span["stage"] == "loop.tool_dispatch"
    )


def test_unknown_model_raises_the_sdks_own_error_and_is_recorded(tiny_server: Any, traced: Path) -> None:
    with pytest.raises(openai.NotFoundError) as bare:
        _openai(tiny_server).chat.completions.create(model="no-such-model", messages=MSGS)
    with pytest.raises(openai.NotFoundError) as traced_exc:
        instrument(_openai(tiny_server)).chat.completions.create(model="no-such-model", messages=MSGS)
    assert str(traced_exc.value) == str(bare.value) and traced_exc.value.body == bare.value.body
    with pytest.raises(anthropic.NotFoundError):
        instrument(_anthropic(tiny_server)).messages.create(
            model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "x"}]
        )
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert [p["status"] for p in passes] == ["error", "error"]
    assert (
        passes[0]["attributes"]["error.type"] == "404"
        and passes[0]["attributes"]["http.response.status_code"] == 404
    )
    spans = rows(traced, "SELECT status_message FROM spans WHERE span_id = ?", [passes[0]["span_id"]])
    assert "no-such-model" in spans[0]["status_message"]


def test_client_and_server_passes_join_into_one_trace(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=3)
    p = client_pass(traced)
    server = wait_for(
        tiny_server.db_path, "SELECT * FROM requests WHERE trace_id = ? AND side = 'server'", [p["trace_id"]]
    )
    assert len(server) == 1, "the server's pass span did not join the client's trace"
    assert server[0]["parent_span_id"] == p["span_id"]
    assert server[0]["span_id"] == p["attributes"]["llmtrace.server.span_id"]
    server_stages = wait_for(
        tiny_server.db_path, "SELECT stage FROM spans WHERE parent_span_id = ?", [server[0]["span_id"]]
    )
    assert "forward.prefill" in {r["stage"] for r in server_stages}  # the engine side of the same waterfall


def test_bytes_reach_the_app_unchanged(tiny_server: Any, traced: Path) -> None:
    seen: list[bytes] = []

    class Tee(httpx.HTTPTransport):
        """Sits *under* the instrumented transport and keeps what the network gave."""

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            resp = super().handle_request(request)
            inner = resp.stream

            class S(httpx.SyncByteStream):
                def __iter__(self) -> Any:
                    for c in inner:
                        seen.append(c)
                        yield c

                def close(self) -> None:
                    inner.close()

            resp.stream = S()
            return resp

    http = instrument(httpx.Client(transport=Tee()))
    # The app asked for usage itself, so nothing is re-framed: the very bytes objects pass through.
    body = {
        "model": "tiny",
        "messages": MSGS,
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with http.stream("POST", f"{tiny_server.base_url}/v1/chat/completions", json=body) as r:
        got = list(r.iter_raw())
    assert got == seen and all(a is b for a, b in zip(got, seen, strict=True))
    assert client_pass(traced)["status"] == "ok"


def test_app_breaking_out_of_a_stream_is_cancelled_not_failed(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    stream = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=64, stream=True)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    p = client_pass(traced)
    assert p["status"] == "cancelled"


def test_legacy_completions_are_text_completion_passes(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4)
    p = client_pass(traced)
    assert p["operation"] == "text_completion" and p["output_tokens"] == r.usage.completion_tokens
    segs = json.loads(p["attributes"]["llmtrace.prompt.segments"])
    assert segs[0]["kind"] == "user" and segs[0]["chars"] == len("Once upon a time")


def test_moderation_cutting_a_real_stream_cancels_the_pass(tiny_server: Any, traced: Path) -> None:
    from llmtrace.adapters.helpers.moderation import StreamModerator

    client = instrument(_openai(tiny_server))
    stream = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=64, stream=True)
    mod = StreamModerator(lambda text: len(text) > 5, every_chars=1)
    shown = list(mod.wrap(stream))
    assert mod.aborted and len(shown) < 64
    p = client_pass(traced)
    assert p["status"] == "cancelled"
    moderation = rows(traced, "SELECT attributes FROM spans WHERE stage = 'safety.moderation'")[0][
        "attributes"
    ]
    assert moderation["llmtrace.moderation.aborted"] is True
    assert moderation["llmtrace.moderation.retracted_chars"] == mod.retracted_chars


def test_instrument_is_idempotent_and_reversible(tiny_server: Any) -> None:
    client = _openai(tiny_server)
    original = client._client._transport
    assert instrument(client) is client and instrument(client) is client
    t = client._client._transport
    assert isinstance(t, InstrumentedTransport) and t.inner is original and is_instrumented(client)
    uninstrument(client)
    assert client._client._transport is original and not is_instrumented(client)
    with pytest.raises(ValueError, match="cannot instrument"):
        instrument(object())
