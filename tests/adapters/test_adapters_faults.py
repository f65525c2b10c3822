"""Faults the real server will not produce on demand: a connection cut mid-stream, a stalled provider,
a refused connection, impossible usage totals, CRLF framing. Each error must reach the app exactly as it
would without llmtrace, and be recorded on the pass span."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from adapters_fake_provider import FakeProvider, Script, fake_provider, sse
from adapters_store import client_pass, rows, stages_of
from testkit import free_port

from llmtrace.adapters import instrument
from llmtrace.tracer import capture, health
from llmtrace.tracer import recording as rec

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "hi"}]


def _chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {
        "id": "c1",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def _answer(content: str, finish: str = "stop", **extra: Any) -> bytes:
    """A buffered (not streamed) chat-completions answer with one choice."""
    message = {"role": "assistant", "content": content}
    return json.dumps(
        {
            "id": "c1",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            **extra,
        }
    ).encode()


@pytest.fixture
def provider() -> Any:
    with fake_provider() as fp:
        yield fp


def _pair(fp: FakeProvider, **kw: Any) -> tuple[openai.OpenAI, openai.OpenAI]:
    def make() -> openai.OpenAI:
        return openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0, **kw)

    return make(), instrument(make())


def _same_failure(
    call: Callable[[openai.OpenAI], Any], bare: openai.OpenAI, traced_client: openai.OpenAI
) -> Exception:
    """Run the same call bare and instrumented; both must fail with the same exception type and text."""
    with pytest.raises(Exception) as a:
        call(bare)
    with pytest.raises(Exception) as b:
        call(traced_client)
    assert type(b.value) is type(a.value) and str(b.value) == str(a.value)
    cause_a, cause_b = a.value.__cause__, b.value.__cause__
    assert type(cause_a) is type(cause_b)
    return b.value


def test_connection_cut_mid_stream(provider: FakeProvider, traced: Path) -> None:
    provider.scripts[CHAT] = Script(
        content_type="text/event-stream",
        cut_after=3,
        chunks=sse(*[_chunk(f"w{i} ") for i in range(8)], _chunk(finish="stop")),
    )
    bare, traced_client = _pair(provider)

    def consume(c: openai.OpenAI) -> None:
        for _ in c.chat.completions.create(model="gpt-4o-mini", messages=MSGS, stream=True):
            pass

    exc = _same_failure(consume, bare, traced_client)
    p = client_pass(traced)
    assert p["status"] == "error"
    status = rows(traced, "SELECT status_message FROM spans WHERE span_id = ?", [p["span_id"]])[0][
        "status_message"
    ]
    assert type(exc.__cause__ or exc).__name__ in status or "RemoteProtocolError" in status
    st = stages_of(traced, p["span_id"])["gen.streaming"]["attributes"]
    assert st["llmtrace.stream.chunks"] == 3  # what arrived before the cut is still recorded


def test_stream_ending_without_end_marker_is_an_error(provider: FakeProvider, traced: Path) -> None:
    provider.scripts[CHAT] = Script(
        content_type="text/event-stream", chunks=sse(_chunk("a"), _chunk("b"), done=False)
    )
    _, client = _pair(provider)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model="gpt-4o-mini", messages=MSGS, stream=True)
    )
    assert text == "ab"  # the app gets what was sent; the trace says it was cut short
    p = client_pass(traced)
    assert p["status"] == "error" and p["attributes"]["error.type"] == "incomplete_stream"


def test_read_timeout(provider: FakeProvider, traced: Path) -> None:
    provider.scripts[CHAT] = Script(
        content_type="text/event-stream", delay_s=0.6, chunks=sse(_chunk("slow"), _chunk("er"))
    )
    bare, traced_client = _pair(provider, timeout=openai.Timeout(5.0, read=0.2))  # the SDK's own: httpx or httpx2

    def consume(c: openai.OpenAI) -> None:
        for _ in c.chat.completions.create(model="gpt-4o-mini", messages=MSGS, stream=True):
            pass

    _same_failure(consume, bare, traced_client)
    p = client_pass(traced)
    assert p["status"] == "error" and p["attributes"]["error.type"] == "ReadTimeout"


def test_connection_refused(traced: Path) -> None:
    port = free_port()  # nothing listens here

    def make() -> openai.OpenAI:
        return openai.OpenAI(api_key="sk-test", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)

    exc = _same_failure(
        lambda c: c.chat.completions.create(model="m", messages=MSGS), make(), instrument(make())
    )
    assert isinstance(exc, openai.APIConnectionError)
    p = client_pass(traced)
    assert p["status"] == "error" and p["attributes"]["error.type"] == "ConnectError"


def test_server_error_body_and_retries_are_recorded(provider: FakeProvider, traced: Path) -> None:
    provider.scripts[CHAT] = Script(
        status=503, chunks=[b'{"error": {"message": "overloaded", "type": "server_error"}}']
    )
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=1))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o-mini", messages=MSGS)
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert [p["status"] for p in passes] == ["error", "error"]  # one pass span per attempt
    assert passes[1]["attributes"]["llmtrace.client.retry_count"] == 1
    msg = rows(traced, "SELECT status_message FROM spans WHERE span_id = ?", [passes[0]["span_id"]])[0]
    assert msg["status_message"] == "HTTP 503: overloaded"


def test_exact_bytes_crlf_framing_and_impossible_usage(provider: FakeProvider, traced: Path) -> None:
    chunks = sse(
        _chunk("Hel"),
        _chunk("lo", "stop"),
        {
            "id": "c1",
            "model": "gpt-4o-mini",
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "total_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 50},
            },
        },
        crlf=True,
    )
    provider.scripts[CHAT] = Script(content_type="text/event-stream", chunks=chunks)
    http = instrument(httpx.Client())
    body = {"model": "gpt-4o-mini", "messages": MSGS, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", f"{provider.base_url}{CHAT}", json=body) as r:
        got = b"".join(r.iter_raw())
    assert got == b"".join(chunks)
    p = client_pass(traced)
    assert p["provider"] == "openai" and p["status"] == "ok"
    assert p["attributes"]["llmtrace.meters.usage_consistent"] is False
    assert "cached tokens exceed input tokens" in p["attributes"]["llmtrace.usage.problems"]
    acct = stages_of(traced, p["span_id"])["meters.cache_accounting"]["attributes"]
    assert acct["llmtrace.meters.usage_consistent"] is False and "llmtrace.meters.cost_usd" not in acct
    assert "llmtrace.meters.cache_hit_rate" not in acct  # no rate from impossible numbers
    # A provider that does not name its own span hides the engine: those stages are marked, never made up.
    st = stages_of(traced, p["span_id"])
    for hidden in ("forward.prefill", "forward.decode", "arrival.admission"):
        assert st[hidden]["attributes"]["llmtrace.observed"] is False
        assert "llmtrace.prefill.ms" not in st[hidden]["attributes"]
    assert p["attributes"]["llmtrace.unobserved_stages"] == [
        "arrival.admission",
        "forward.prefill",
        "forward.decode",
    ]


def test_traceparent_is_injected_and_an_app_supplied_one_is_the_parent(
    provider: FakeProvider, traced: Path
) -> None:
    provider.scripts[CHAT] = Script(chunks=[_answer("ok")])
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    with rec.start_pass("agent", operation="invoke_agent", side="app") as outer:
        client.chat.completions.create(model="m", messages=MSGS)
    p = client_pass(traced)
    sent = provider.requests[-1][1]["traceparent"]
    assert sent.split("-")[1] == p["trace_id"] == outer.trace_id and sent.split("-")[2] == p["span_id"]
    assert p["parent_span_id"] == outer.span_id
    explicit = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    client.chat.completions.create(model="m", messages=MSGS, extra_headers={"traceparent": explicit})
    last = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")[-1]
    assert last["trace_id"] == "ab" * 16 and last["parent_span_id"] == "cd" * 8


def test_anthropic_error_event_inside_a_stream(provider: FakeProvider, traced: Path) -> None:
    provider.scripts["/v1/messages"] = Script(
        content_type="text/event-stream",
        chunks=sse(
            {
                "type": "message_start",
                "message": {"id": "m1", "model": "claude-3-5-haiku", "usage": {"input_tokens": 3}},
            },
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            anthropic=True,
        ),
    )

    def run(c: anthropic.Anthropic) -> None:
        with c.messages.stream(model="claude-3-5-haiku", max_tokens=5, messages=MSGS) as s:
            for _ in s:
                pass

    def make() -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key="k", base_url=provider.base_url, max_retries=0)

    with pytest.raises(anthropic.APIStatusError) as bare:
        run(make())
    with pytest.raises(anthropic.APIStatusError) as traced_exc:
        run(instrument(make()))
    assert type(traced_exc.value) is type(bare.value) and str(traced_exc.value) == str(bare.value)
    p = client_pass(traced)
    assert p["status"] == "error" and p["attributes"]["error.type"] == "overloaded_error"


def test_recording_faults_never_reach_the_app(
    provider: FakeProvider, traced: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider.scripts[CHAT] = Script(
        content_type="text/event-stream", chunks=sse(_chunk("x"), _chunk("y", "stop"))
    )
    from llmtrace.adapters.middleware import openai_parser

    def broken(self: Any, *a: Any) -> None:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(openai_parser.OpenAIParser, "on_chunk", broken)
    before = health.counters().get("adapter_error", 0)
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    out = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model="gpt-4o-mini", messages=MSGS, stream=True)
    )
    assert out == "xy"
    assert (
        health.counters()["adapter_error"] == before + 1
    )  # counted once; the rest of the stream passes through


async def test_plain_async_httpx_client_for_an_openai_compatible_endpoint(
    provider: FakeProvider, traced: Path
) -> None:
    chunks = sse(*[_chunk(c) for c in "abcd"], _chunk("e", "stop"))
    provider.scripts[CHAT] = Script(content_type="text/event-stream", chunks=chunks, delay_s=0.02)
    async with instrument(httpx.AsyncClient()) as http:
        body = {"model": "local-llama", "messages": MSGS, "stream": True, "temperature": 0.7}
        async with http.stream("POST", f"{provider.base_url}{CHAT}", json=body) as r:
            got = b"".join([c async for c in r.aiter_raw()])
        await http.get(f"{provider.base_url}/v1/models")  # not an inference call: passes through untraced
    assert got == b"".join(chunks)
    p = client_pass(traced)
    assert (p["model"], p["temperature"], p["finish_reason"], p["status"]) == (
        "local-llama",
        0.7,
        "stop",
        "ok",
    )
    st = stages_of(traced, p["span_id"])
    assert st["arrival.connection"]["attributes"]["llmtrace.connection.reused"] is False
    # The provider waits 20 ms between events; a busy client may read two at once, but not all of them.
    assert st["gen.streaming"]["attributes"]["llmtrace.stream.itl_p99_ms"] >= 10


def test_full_capture_keeps_scrubbed_text(provider: FakeProvider, store_path: Path) -> None:
    import llmtrace

    provider.scripts[CHAT] = Script(
        content_type="text/event-stream", chunks=sse(_chunk("Your key "), _chunk("is safe", "stop"))
    )
    llmtrace.init(db=store_path, capture="full", strict=True)
    try:
        client = instrument(
            openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0)
        )
        for _ in client.chat.completions.create(
            model="m",
            stream=True,
            messages=[
                {"role": "system", "content": "Be safe."},
                {"role": "user", "content": "my key is sk-proj-abcdefghijklmnopqrstuvwxyz012345"},
            ],
        ):
            pass
        attrs = client_pass(store_path)["attributes"]
    finally:
        llmtrace.shutdown()
    assert (
        "[system]\nBe safe." in attrs["llmtrace.prompt.text"]
        and capture.REDACTED_MARKER.search(attrs["llmtrace.prompt.text"])
    )
    assert "abcdefghijklmnop" not in json.dumps(attrs)
    assert attrs["llmtrace.output.text"] == "Your key is safe"
    assert attrs["llmtrace.output.hash"] and attrs["llmtrace.prompt.hash"]


def test_a_response_dropped_unread_still_ends_its_span(provider: FakeProvider, traced: Path) -> None:
    import gc

    provider.scripts[CHAT] = Script(
        content_type="text/event-stream", chunks=sse(_chunk("a"), _chunk("b", "stop"))
    )
    http = instrument(httpx.Client())
    r = http.send(
        http.build_request(
            "POST", f"{provider.base_url}{CHAT}", json={"model": "m", "messages": MSGS, "stream": True}
        ),
        stream=True,
    )
    del r
    gc.collect()
    p = client_pass(traced)
    assert p["status"] == "cancelled"
    http.close()


def test_truncated_json_is_noted_on_gen_stop_and_the_stop_check_is_left_to_the_app(
    provider: FakeProvider, traced: Path
) -> None:
    truncated = _answer('{"answer": "the parc', "length", usage={"prompt_tokens": 5, "completion_tokens": 8})
    provider.scripts[CHAT] = Script(chunks=[truncated])
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    client.chat.completions.create(
        model="m", messages=MSGS, max_tokens=8, response_format={"type": "json_object"}
    )
    p = client_pass(traced)
    assert p["attributes"]["gen_ai.output.type"] == "json" and p["finish_reason"] == "length"
    st = stages_of(traced, p["span_id"])
    stop = st["gen.stop"]["attributes"]
    assert stop["llmtrace.stop.truncated"] is True and stop["llmtrace.stop.output_parses"] is False
    # Only the app knows whether it read the stop reason; the middleware does not claim a check happened.
    assert "safety.stop_reason" not in st


@pytest.mark.parametrize("stream", [False, True])
def test_compressed_responses_are_parsed_from_a_copy(
    provider: FakeProvider, traced: Path, stream: bool
) -> None:
    import gzip

    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 2,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    if stream:
        raw = b"".join(
            sse(
                _chunk("Hi"),
                _chunk(" there", "stop"),
                {"id": "c1", "model": "m", "choices": [], "usage": usage},
            )
        )
        ctype = "text/event-stream"
    else:
        raw = _answer("Hi there", usage=usage)
        ctype = "application/json"
    packed = gzip.compress(raw)
    provider.scripts[CHAT] = Script(
        content_type=ctype,
        headers={"content-encoding": "gzip"},
        chunks=[packed[i : i + 7] for i in range(0, len(packed), 7)],
    )
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    if stream:
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(model="m", messages=MSGS, stream=True)
            if c.choices
        )
    else:
        text = client.chat.completions.create(model="m", messages=MSGS).choices[0].message.content or ""
    assert text == "Hi there"  # the app still gets the decoded answer from its own HTTP client
    p = client_pass(traced)
    assert (p["status"], p["prompt_tokens"], p["cached_tokens"], p["finish_reason"]) == ("ok", 12, 8, "stop")


def test_an_encoding_we_cannot_decode_is_named_not_guessed(provider: FakeProvider, traced: Path) -> None:
    provider.scripts[CHAT] = Script(headers={"content-encoding": "x-custom"}, chunks=[b"\x00\x01binary"])
    http = instrument(httpx.Client())
    r = http.post(f"{provider.base_url}{CHAT}", json={"model": "m", "messages": MSGS})
    assert r.status_code == 200
    p = client_pass(traced)
    assert p["status"] == "ok" and p["attributes"]["llmtrace.response.undecoded_encoding"] == "x-custom"
    assert p["prompt_tokens"] is None


def test_nothing_is_marked_unobserved_when_the_provider_was_never_reached(traced: Path) -> None:
    client = instrument(
        openai.OpenAI(api_key="sk-test", base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    )
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=MSGS)
    p = client_pass(traced)
    assert "llmtrace.unobserved_stages" not in p["attributes"]
    assert not any(s.startswith("forward.") for s in stages_of(traced, p["span_id"]))


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-4.1-mini-2025-04-14",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Refunds take five days.", "annotations": []}],
        }
    ],
    "usage": {
        "input_tokens": 300,
        "input_tokens_details": {"cached_tokens": 256},
        "output_tokens": 6,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 306,
    },
}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_api(provider: FakeProvider, traced: Path, stream: bool) -> None:
    if stream:
        created = {**RESPONSE, "status": "in_progress", "output": [], "usage": None}
        events = [
            {"type": "response.created", "sequence_number": 0, "response": created},
            {
                "type": "response.output_text.delta",
                "sequence_number": 1,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "Refunds take ",
            },
            {
                "type": "response.output_text.delta",
                "sequence_number": 2,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "five days.",
            },
            {"type": "response.completed", "sequence_number": 3, "response": RESPONSE},
        ]
        chunks = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
        provider.scripts["/v1/responses"] = Script(content_type="text/event-stream", chunks=chunks)
    else:
        provider.scripts["/v1/responses"] = Script(chunks=[json.dumps(RESPONSE).encode()])
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    kw = {
        "model": "gpt-4.1-mini",
        "instructions": "Today is 2026-11-29. Be brief.",
        "input": "How long do refunds take?",
        "max_output_tokens": 64,
    }
    if stream:
        text = "".join(
            e.delta for e in client.responses.create(stream=True, **kw) if e.type.endswith("text.delta")
        )
    else:
        text = client.responses.create(**kw).output_text
    assert text == "Refunds take five days."
    p = client_pass(traced)
    assert (p["provider"], p["model"], p["response_model"], p["finish_reason"]) == (
        "openai",
        "gpt-4.1-mini",
        "gpt-4.1-mini-2025-04-14",
        "stop",
    )
    assert (p["prompt_tokens"], p["cached_tokens"], p["output_tokens"], p["max_tokens"]) == (300, 256, 6, 64)
    assert p["cost_usd"] == pytest.approx((44 * 0.40 + 256 * 0.10 + 6 * 1.60) / 1e6)
    st = stages_of(traced, p["span_id"])
    assert st["intake.system_prompt"]["attributes"]["llmtrace.system.volatile_kind"] == "date"
    assert (p["ttft_ms"] is not None) is stream
