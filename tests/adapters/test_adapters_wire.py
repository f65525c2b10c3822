"""What the middleware reads off the wire alone (issue 16): usage on every stream, the shape of what changed
between prompts, output shape, sessions, loops and history, prices, provider cache diagnostics.

Real SDKs against the real ``llmtrace serve`` (tiny model), in the default ``hashes`` capture mode; every
test checks that no prompt or output text reached the store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from adapters_fake_provider import FakeProvider, Script, fake_provider, sse
from adapters_store import assert_no_text, client_pass, rows, stages_of
from adapters_tools import WEATHER_TOOL

from llmtrace.adapters import instrument

SYSTEM = "You are the support agent of a parcel company. Answer briefly and politely."
QUESTION = "Where is my parcel with the blue sticker?"
MSGS = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
_VARYING = re.compile(rb'"id":"[^"]*"|"created":\d+')


@pytest.fixture
def provider() -> Any:
    with fake_provider() as fp:
        yield fp


def _chunk(content: str | None = None, finish: str | None = None, model: str = "gpt-4o-mini") -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {"id": "c1", "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _openai(server: Any, cls: type = openai.OpenAI, **kw: Any) -> Any:
    return cls(api_key="sk-test", base_url=f"{server.base_url}/v1", max_retries=0, **kw)


def _same(b: bytes | str) -> bytes:
    """A chunk with the per-request id and clock blanked (the only bytes two identical calls differ in)."""
    return _VARYING.sub(b"", b.encode() if isinstance(b, str) else b)


def _kw(**extra: Any) -> dict[str, Any]:
    return dict(model="tiny", messages=MSGS, max_tokens=12, temperature=0.0, stream=True, **extra)


# ── 1. usage on every streamed call ─────────────────────────────────────────────────────────
def test_streams_get_usage_and_the_app_sees_the_chunks_it_would_without_llmtrace(
    tiny_server: Any, traced: Path
) -> None:
    bare, traced_client = _openai(tiny_server), instrument(_openai(tiny_server))
    expected = [_same(c.model_dump_json(exclude_unset=True)) for c in bare.chat.completions.create(**_kw())]
    got = [_same(c.model_dump_json(exclude_unset=True)) for c in traced_client.chat.completions.create(**_kw())]
    assert got == expected and b'"usage"' not in b"".join(got)
    with bare.chat.completions.with_streaming_response.create(**_kw()) as r:
        raw_bare = b"".join(r.iter_bytes())
    with traced_client.chat.completions.with_streaming_response.create(**_kw()) as r:
        raw_traced = b"".join(r.iter_bytes())
    assert _same(raw_traced) == _same(raw_bare) and raw_traced.endswith(b"data: [DONE]\n\n")
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert len(passes) == 2
    for p in passes:
        a = p["attributes"]
        assert a["llmtrace.usage.source"] == "provider" and a["llmtrace.usage.requested"] is True
        assert p["output_tokens"] == 12 and p["prompt_tokens"] > 0 and a["llmtrace.usage.estimated"] is False
    streaming = stages_of(traced, passes[0]["span_id"])["gen.streaming"]["attributes"]
    assert streaming["llmtrace.stream.chunks"] == len(got)  # the hidden usage chunk is not counted
    assert_no_text(traced, SYSTEM, QUESTION)


async def test_async_stream_gets_usage_and_the_same_chunks(tiny_server: Any, traced: Path) -> None:
    bare = _openai(tiny_server, openai.AsyncOpenAI)
    traced_client = instrument(_openai(tiny_server, openai.AsyncOpenAI))
    expected = [_same(c.model_dump_json(exclude_unset=True)) async for c in await bare.chat.completions.create(**_kw())]
    got = [
        _same(c.model_dump_json(exclude_unset=True)) async for c in await traced_client.chat.completions.create(**_kw())
    ]
    assert got == expected
    async with traced_client.chat.completions.with_streaming_response.create(**_kw()) as r:
        raw = b"".join([b async for b in r.iter_bytes()])
    assert b'"usage"' not in raw and raw.endswith(b"data: [DONE]\n\n")
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert [p["output_tokens"] for p in passes] == [12, 12]
    assert all(p["attributes"]["llmtrace.usage.source"] == "provider" for p in passes)
    await bare.close()
    await traced_client.close()


def test_request_usage_false_leaves_the_request_and_estimates(tiny_server: Any, traced: Path) -> None:
    seen: list[bytes] = []

    class Tee(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.read())
            return super().handle_request(request)

    client = instrument(_openai(tiny_server, http_client=httpx.Client(transport=Tee())), request_usage=False)
    chunks = list(client.chat.completions.create(**_kw()))
    assert b"stream_options" not in seen[0] and chunks[-1].usage is None
    p = client_pass(traced)
    a = p["attributes"]
    assert a["llmtrace.usage.source"] == "estimated" and a["llmtrace.usage.estimated"] is True
    assert p["prompt_tokens"] is None  # an estimate never poses as the provider's count
    assert a["llmtrace.usage.estimated_input_tokens"] == (len(SYSTEM) + 3) // 4 + (len(QUESTION) + 3) // 4
    assert a["llmtrace.usage.estimated_output_tokens"] > 0
    # With the app's own tokenizer the counts are its counts.
    tok = instrument(_openai(tiny_server), request_usage=False, tokenizer=lambda text: len(text.split()))
    list(tok.chat.completions.create(**_kw()))
    second = rows(traced, "SELECT attributes FROM requests WHERE side='client' ORDER BY start_ns")[1]["attributes"]
    assert second["llmtrace.usage.estimator"] == "tokenizer"
    assert second["llmtrace.usage.estimated_input_tokens"] == len(SYSTEM.split()) + len(QUESTION.split())
    assert_no_text(traced, SYSTEM, QUESTION)


# ── 2. the shape of what changed ────────────────────────────────────────────────────────────
def _tool(name: str, note: str = "") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": f"Look up {name}.{note}", "parameters": {"type": "object"}},
    }


def _prefix_stages(db: Path) -> list[dict[str, Any]]:
    passes = rows(db, "SELECT span_id FROM requests WHERE side='client' ORDER BY start_ns")
    return [stages_of(db, p["span_id"])["cache.prefix_match"]["attributes"] for p in passes]


def test_divergence_window_and_class_between_prompts_of_one_template(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    clock = "You are the support agent. Current time: {}. Answer briefly and politely to the customer."
    for t in ("2026-11-29T10:15:00Z", "2026-11-29T10:16:41Z"):
        msgs = [{"role": "system", "content": clock.format(t)}, {"role": "user", "content": QUESTION}]
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=2)
    tools = [_tool("orders"), _tool("refunds"), _tool("parcels")]
    for i, order in enumerate(([0, 1, 2], [2, 0, 1])):
        ids = ["3f2a9c1e-1111-4222-8333-123456789abc", "9b7d2e4f-2222-4333-8444-abcdef012345"]
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"{QUESTION} (request {ids[i]})"}],
            tools=[tools[j] for j in order],
            max_tokens=2,
        )
    first, second, third, fourth = _prefix_stages(traced)
    assert "llmtrace.divergence.class" not in first and first["llmtrace.divergence.prompt_tokens_est"] > 10
    assert second["llmtrace.divergence.template"] == first["llmtrace.divergence.template"]
    assert (second["llmtrace.divergence.class"], second["llmtrace.divergence.segment"]) == ("timestamp", "system")
    assert second["llmtrace.divergence.char_offset"] == clock.index("{}")
    assert second["llmtrace.divergence.segment_offset"] == clock.index("{}")
    assert second["llmtrace.divergence.length"] == len("2026-11-29T10:16:41Z")
    tail = len(clock) - clock.index("{}") - 2 + len(QUESTION)
    assert second["llmtrace.divergence.reusable_after_tokens"] == (tail + 3) // 4
    assert second["llmtrace.divergence.shared_prefix_tokens"] == (clock.index("{}") + 3) // 4
    # Another template (tools first): compared only within itself; the shuffled tools are named as such.
    assert third["llmtrace.divergence.template"] != first["llmtrace.divergence.template"]
    assert "llmtrace.divergence.class" not in third
    assert (fourth["llmtrace.divergence.class"], fourth["llmtrace.divergence.segment"]) == ("reordered", "tools")
    # After the shuffled items: the tools' shared tail and the user turn up to its differing id.
    assert 0 < fourth["llmtrace.divergence.reusable_after_tokens"] < fourth["llmtrace.divergence.prompt_tokens_est"]
    assert_no_text(traced, clock, QUESTION, "Look up orders.")


def test_divergence_classes_for_ids_counters_emails_and_invisible_text(tiny_server: Any, traced: Path) -> None:
    client = instrument(_openai(tiny_server))
    cases = {
        "hex_id": ("Trace a1b2c3d4e5f60718 is open.", "Trace 0f9e8d7c6b5a4321 is open."),
        "id": ("Customer u-7f3a asks.", "Customer u-19c2 asks."),  # a short id of no other shape
        "counter": ("This is turn 4 of the chat.", "This is turn 5 of the chat."),
        "email": ("Customer alice@example.com asks.", "Customer bob.smith@corp.org asks."),
        "invisible": ("Answer the question.", "Answer the\u200b question."),
        "whitespace": ("Answer  the question.", "Answer the question."),
    }
    for model_suffix, (a, b) in enumerate(cases.values()):
        for system in (a, b):  # a model name per case keeps each case its own template
            client.chat.completions.create(
                model="tiny",
                messages=[{"role": "system", "content": f"[{model_suffix}] {system}"}, {"role": "user", "content": "hi"}],
                max_tokens=1,
            )
    found = [s.get("llmtrace.divergence.class") for s in _prefix_stages(traced)[1::2]]
    assert found == list(cases)


# ── 3. output shape ─────────────────────────────────────────────────────────────────────────
def test_json_asked_in_words_and_cut_leaves_its_shape(provider: FakeProvider, traced: Path) -> None:
    answer = ['{"customer": "Ada Lovelace", ', '"parcel": "in Os']
    provider.scripts["/v1/chat/completions"] = Script(
        content_type="text/event-stream", chunks=sse(_chunk(answer[0]), _chunk(answer[1], "length"))
    )
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    ask = [{"role": "user", "content": "Reply in JSON with the customer name and parcel place."}]
    list(client.chat.completions.create(model="gpt-4o-mini", messages=ask, max_tokens=9, stream=True))
    p = client_pass(traced)
    stop = stages_of(traced, p["span_id"])["gen.stop"]["attributes"]
    assert (stop["llmtrace.output.shape"], stop["llmtrace.output.parses"]) == ("json", False)
    assert stop["llmtrace.output.structured_guess"] is True and "gen_ai.output.type" not in stop
    assert stop["llmtrace.stop.truncated"] is True
    assert p["attributes"]["llmtrace.output.shape"] == "json"
    assert_no_text(traced, ask[0]["content"], "Ada Lovelace", answer[1])


@pytest.mark.parametrize("max_tokens", [40, 3])
def test_response_format_sets_the_output_type_and_parsing_is_checked(
    tiny_server: Any, traced: Path, max_tokens: int
) -> None:
    client = instrument(_openai(tiny_server))
    schema = {"type": "object", "properties": {"n": {"enum": [1, 2, 3]}}, "required": ["n"], "additionalProperties": False}
    r = client.chat.completions.create(
        model="tiny",
        messages=MSGS,
        max_tokens=max_tokens,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )
    stop = stages_of(traced, client_pass(traced)["span_id"])["gen.stop"]["attributes"]
    assert stop["gen_ai.output.type"] == "json" and "llmtrace.output.structured_guess" not in stop
    assert stop["llmtrace.output.shape"] == "json"
    assert stop["llmtrace.output.parses"] is (r.choices[0].finish_reason == "stop")
    assert r.choices[0].finish_reason == ("stop" if max_tokens == 40 else "length")  # both cases really ran
    assert_no_text(traced, SYSTEM, QUESTION)


def test_plain_text_and_fenced_answers(provider: FakeProvider, traced: Path) -> None:
    client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    for text in ("Your parcel is in Oslo.", "```json\n{\"place\": \"Oslo\"}\n```", "<parcel><place>Oslo"):
        provider.scripts["/v1/chat/completions"] = Script(content_type="text/event-stream", chunks=sse(_chunk(text, "stop")))
        list(client.chat.completions.create(model="gpt-4o-mini", messages=MSGS, stream=True))
    passes = rows(traced, "SELECT attributes FROM requests WHERE side='client' ORDER BY start_ns")
    got = [(p["attributes"]["llmtrace.output.shape"], p["attributes"].get("llmtrace.output.parses")) for p in passes]
    assert got == [("text", None), ("fenced", True), ("xml", False)]


# ── 5. sessions; an agent turn with tool round trips is one trace ───────────────────────────
def _agent_turns(client: Any, user: str | None = None) -> list[dict[str, Any]]:
    """Question -> tool call -> tool result -> answer, then a second question: what an agent sends."""
    extra: dict[str, Any] = {"user": user} if user else {}
    msgs: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Weather in Oslo today?"}]
    forced = {"type": "function", "function": {"name": "get_weather"}}
    r = client.chat.completions.create(
        model="tiny", messages=msgs, tools=[WEATHER_TOOL], tool_choice=forced, max_tokens=30, **extra
    )
    call = r.choices[0].message.tool_calls[0]
    msgs += [r.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "Sunny and 21 degrees in Oslo"}]
    r2 = client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL], max_tokens=4, **extra)
    msgs += [r2.choices[0].message, {"role": "user", "content": "And tomorrow in Paris?"}]
    client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL], max_tokens=4, **extra)
    return msgs


def test_a_tool_round_trip_is_one_trace_and_the_conversation_one_session(tiny_server: Any, traced: Path) -> None:
    _agent_turns(instrument(_openai(tiny_server)))
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert len(passes) == 3
    first, second, third = passes
    assert second["trace_id"] == first["trace_id"] and second["parent_span_id"] == first["span_id"]
    assert third["trace_id"] != first["trace_id"]  # a new question from the user: a new turn
    assert len({p["session_id"] for p in passes}) == 1 and passes[0]["session_id"]
    assert all(p["attributes"]["llmtrace.session.inferred"] is True for p in passes)
    trace = rows(traced, "SELECT * FROM traces WHERE trace_id = ?", [first["trace_id"]])[0]
    assert (trace["passes"], trace["tool_calls"]) == (2, 1)
    tool = rows(traced, "SELECT * FROM spans WHERE stage = 'loop.tool_dispatch'")[0]
    assert tool["attributes"]["gen_ai.tool.name"] == "get_weather"
    assert tool["attributes"]["llmtrace.tool.observed"] == "wire"
    assert tool["start_ns"] <= tool["end_ns"] <= second["start_ns"]
    assert_no_text(traced, SYSTEM, "Weather in Oslo today?", "Sunny and 21 degrees", "And tomorrow in Paris?")


def test_explicit_sessions_and_users_from_the_request(tiny_server: Any, traced: Path) -> None:
    import anthropic

    import llmtrace

    client = instrument(_openai(tiny_server))
    with llmtrace.session("ticket-4711", user="agent-7"):
        client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Other topic"}], max_tokens=2)
    client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=2, user="alice@example.com")
    client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=2, metadata={"session_id": "chat-9"})
    ac = instrument(anthropic.Anthropic(api_key="test", base_url=tiny_server.base_url, max_retries=0))
    ac.messages.create(model="tiny", max_tokens=2, messages=MSGS[1:], metadata={"user_id": "alice@example.com"})
    p = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert [(x["session_id"], x["user_id"]) for x in p[:2]] == [("ticket-4711", "agent-7")] * 2
    assert p[0]["attributes"]["llmtrace.session.inferred"] is False
    # A user id read off the wire is a keyed hash in hashes mode; equal ids still match across providers.
    assert p[2]["user_id"] and p[2]["user_id"] != "alice@example.com" and p[2]["user_id"] == p[4]["user_id"]
    assert p[2]["attributes"]["llmtrace.session.inferred"] is True
    assert p[3]["session_id"] == "chat-9" and p[3]["attributes"]["llmtrace.session.inferred"] is False
    assert_no_text(traced, SYSTEM, QUESTION, "alice@example.com")


# ── 4. loops and history from the messages array ────────────────────────────────────────────
def _tool_call(i: int, city: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}


def test_repeated_tool_calls_in_the_history_are_a_wire_loop_signal(tiny_server: Any, traced: Path) -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
    for i, city in enumerate(["Oslo", "Oslo", "Paris", "Oslo"]):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [_tool_call(i, city)]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "Unavailable, try again"})
    client = instrument(_openai(tiny_server))
    client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL], max_tokens=2)
    client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)  # no tools: no loop.budget
    passes = rows(traced, "SELECT span_id FROM requests WHERE side='client' ORDER BY start_ns")
    budget = stages_of(traced, passes[0]["span_id"])["loop.budget"]["attributes"]
    # Oslo twice more by its arguments; Paris too, by its result: "Unavailable" again after the model had read it
    # (no progress, whatever it asked)
    assert budget["llmtrace.loop.repeated_tool_calls"] == 3 and budget["llmtrace.budget.loop_detected"] is True
    assert budget["llmtrace.loop.repeated_tool_results"] == 3
    assert budget["llmtrace.budget.steps"] == 4 and budget["llmtrace.loop.observed"] == "wire"
    assert "loop.budget" not in stages_of(traced, passes[1]["span_id"])
    assert_no_text(traced, "Unavailable, try again", "Weather in Oslo?")


def test_history_that_no_longer_extends_the_previous_request_is_wire_compaction(
    tiny_server: Any, traced: Path
) -> None:
    import llmtrace

    client = instrument(_openai(tiny_server))
    long_history = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "My parcel number is 4471 and it is late."},
        {"role": "assistant", "content": "I am sorry to hear that, let me check the parcel."},
        {"role": "user", "content": QUESTION},
    ]
    summary = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summary so far: a late parcel was discussed."},
        {"role": "user", "content": "Any news today?"},
    ]
    with llmtrace.session("ticket-1"):
        client.chat.completions.create(model="tiny", messages=long_history, max_tokens=2)
        client.chat.completions.create(model="tiny", messages=summary, max_tokens=2)
    # Inferred conversation: the same opening, the middle rewritten.
    client.chat.completions.create(model="tiny", messages=long_history, max_tokens=2)
    rewritten = long_history[:2] + [{"role": "assistant", "content": "(earlier turns trimmed)"}, summary[-1]]
    client.chat.completions.create(model="tiny", messages=rewritten, max_tokens=2)
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    c1 = stages_of(traced, passes[1]["span_id"])["loop.compaction"]["attributes"]
    assert c1["llmtrace.compaction.history_rewritten"] is True and c1["llmtrace.compaction.observed"] == "wire"
    assert c1["llmtrace.compaction.turns_summarized"] == 3 and c1["llmtrace.compaction.kept_messages"] == 1
    assert c1["llmtrace.compaction.tokens_before"] > c1["llmtrace.compaction.tokens_after"]
    assert "loop.compaction" not in stages_of(traced, passes[0]["span_id"])
    assert passes[3]["session_id"] == passes[2]["session_id"] != "ticket-1"
    c2 = stages_of(traced, passes[3]["span_id"])["loop.compaction"]["attributes"]
    assert c2["llmtrace.compaction.kept_messages"] == 2 and c2["llmtrace.compaction.turns_summarized"] == 2
    assert_no_text(traced, SYSTEM, "My parcel number is 4471", "Summary so far", "earlier turns trimmed")


def test_prompt_memory_stays_bounded() -> None:
    from llmtrace.tracer.reading.divergence import PromptHistory

    h = PromptHistory(max_templates=4, per_template=2, max_total_chars=5_000)
    for i in range(200):
        h.observe(f"template-{i % 7}", [("system", f"{i:04d}" + "x" * 900), ("user", "hi")])
        assert h.kept_chars <= 5_000
    assert h.kept_chars > 0


@pytest.mark.parametrize("nl", ["\n", "\r\n"])
def test_usage_filter_gives_the_same_bytes_however_the_stream_is_cut(nl: str) -> None:
    from llmtrace.adapters.middleware.request_usage import UsageStripper

    def event(obj: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(obj, separators=(',', ':'))}{nl}{nl}".encode()

    plain = [_chunk("Hel"), _chunk('lo, "usage":null', "stop")]
    without = b"".join(event(c) for c in plain) + f"data: [DONE]{nl}{nl}".encode()
    asked = b"".join(event({**c, "usage": None}) for c in plain)
    asked += event({"id": "c1", "model": "gpt-4o-mini", "choices": [], "usage": {"prompt_tokens": 3}})
    asked += f"data: [DONE]{nl}{nl}".encode()
    for cut in range(1, len(asked)):
        s = UsageStripper()
        out = s.feed(asked[:cut]) + s.feed(asked[cut:]) + s.flush()
        assert out == without, cut
        assert s.dropped == 1


def test_anthropic_tool_round_trip_joins_the_trace(tiny_server: Any, traced: Path) -> None:
    import anthropic

    client = instrument(anthropic.Anthropic(api_key="test", base_url=tiny_server.base_url, max_retries=0))
    tool = {"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object"}}
    ask = [{"role": "user", "content": "Weather in Oslo today?"}]
    client.messages.create(model="tiny", max_tokens=3, tools=[tool], messages=ask)
    answered = ask + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny and 21 degrees in Oslo"}]},
    ]
    client.messages.create(model="tiny", max_tokens=3, tools=[tool], messages=answered)
    first, second = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    assert second["trace_id"] == first["trace_id"] and second["session_id"] == first["session_id"]
    tool_span = rows(traced, "SELECT * FROM spans WHERE stage = 'loop.tool_dispatch'")[0]
    assert tool_span["attributes"]["gen_ai.tool.name"] == "get_weather"
    assert tool_span["attributes"]["gen_ai.tool.call.id"] == "toolu_1"
    assert_no_text(traced, "Weather in Oslo today?", "Sunny and 21 degrees")
