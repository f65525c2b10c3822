"""The official ``openai`` SDK's Responses API (``client.responses``), unmodified, against the real server."""

from __future__ import annotations

import json
import uuid
from typing import Literal

import openai
import pydantic
import pytest
from server_testkit import stages_of, wait_rows

GREEDY = {"temperature": 0, "ignore_eos": True}
SCHEMA = {"type": "object", "properties": {"priority": {"type": "string", "enum": ["low", "high"]}},
          "required": ["priority"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "the weather in a city", "strict": True,
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                         "required": ["city"], "additionalProperties": False}}]


def _client(server) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def _reusable(prompt_tokens: int) -> int:
    """Tokens of a prompt a follow-up must find cached: its full KV blocks (16 tokens) before its last token.
    The last token is the generation prompt's newline, which the follow-up may tokenize together with the
    answer that came after it (the tiny model answers in newlines), so its block is not guaranteed."""
    return ((prompt_tokens - 1) // 16) * 16


def test_create_with_instructions_and_usage(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    raw = client.responses.with_raw_response.create(model="tiny", instructions="You are terse.", input="Say hi.",
                                                    max_output_tokens=6, extra_body=GREEDY)
    r = raw.parse()
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "tiny"
    assert r.instructions == "You are terse." and r.max_output_tokens == 6
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output[0].content[0].type == "output_text" and r.output_text == r.output[0].content[0].text
    u = r.usage
    assert u is not None and u.output_tokens == 6 and u.input_tokens > 5
    assert u.total_tokens == u.input_tokens + u.output_tokens and u.input_tokens_details.cached_tokens >= 0
    # the same prompt through chat completions: the same prompt tokens and the same greedy text
    chat = client.chat.completions.create(model="tiny", max_tokens=6, extra_body=GREEDY, messages=[
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}])
    assert chat.usage is not None and chat.usage.prompt_tokens == u.input_tokens
    assert chat.choices[0].message.content == r.output_text
    # one pass span with the same stages a chat completion records
    tid = raw.headers["x-llmtrace-trace-id"]
    rows = wait_rows(tiny_server.db_path, "SELECT operation, side, finish_reason, prompt_tokens, output_tokens, "
                     "attributes->>'gen_ai.response.id' FROM requests WHERE trace_id = ?", [tid])
    assert rows == [("chat", "server", "length", u.input_tokens, 6, r.id)]
    chat_tid = client.chat.completions.with_raw_response.create(
        model="tiny", max_tokens=6, messages=[{"role": "user", "content": "Say hi."}]).headers["x-llmtrace-trace-id"]
    wait_rows(tiny_server.db_path, "SELECT 1 FROM stages WHERE trace_id = ? AND stage = 'gen.stop'", [chat_tid])
    wait_rows(tiny_server.db_path, "SELECT 1 FROM stages WHERE trace_id = ? AND stage = 'gen.stop'", [tid])
    assert sorted(stages_of(tiny_server.db_path, tid)) == sorted(stages_of(tiny_server.db_path, chat_tid))


def test_max_output_tokens_is_incomplete(tiny_server) -> None:  # type: ignore[no-untyped-def]
    r = _client(tiny_server).responses.create(model="tiny", input="Count to a hundred.", max_output_tokens=3,
                                              extra_body=GREEDY)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.usage is not None and r.usage.output_tokens == 3


def test_stream_events(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    with client.responses.stream(model="tiny", input="Rate it.", max_output_tokens=40,
                                 text={"format": {"type": "json_schema", "name": "rating", "schema": SCHEMA}}) as s:
        events = list(s)
        final = s.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.status == "completed" and final.output_text == deltas
    assert json.loads(deltas)["priority"] in ("low", "high")
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens is not None
    # create(stream=True) at the cap ends in response.incomplete, as the API does
    stream = client.responses.create(model="tiny", input="Count.", max_output_tokens=4, stream=True,
                                     extra_body=GREEDY)
    got = list(stream)
    last = got[-1]
    assert last.type == "response.incomplete" and last.response.incomplete_details.reason == "max_output_tokens"
    streamed = "".join(e.delta for e in got if e.type == "response.output_text.delta")
    plain = client.responses.create(model="tiny", input="Count.", max_output_tokens=4, extra_body=GREEDY)
    assert streamed == plain.output_text and last.response.output[0].content[0].text == streamed


def test_input_items_and_text_format(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    items = [{"role": "developer", "content": "Answer in JSON."},
             {"role": "user", "content": [{"type": "input_text", "text": "Rate the ticket."}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Which ticket?"}]},
             {"type": "message", "role": "user", "content": "Ticket 9."}]
    r = client.responses.create(model="tiny", input=items, max_output_tokens=40,  # type: ignore[arg-type]
                                text={"format": {"type": "json_schema", "name": "rating", "schema": SCHEMA,
                                                 "strict": True}})
    assert r.status == "completed" and json.loads(r.output_text)["priority"] in ("low", "high")
    assert r.text is not None and r.text.format is not None and r.text.format.type == "json_schema"

    class Rating(pydantic.BaseModel):
        priority: Literal["low", "high"]

    parsed = client.responses.parse(model="tiny", input="Rate the ticket.", text_format=Rating, max_output_tokens=40)
    assert parsed.output_parsed is not None and parsed.output_parsed.priority in ("low", "high")


def test_function_tools(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    r = client.responses.create(model="tiny", input="Weather in Paris?", tools=TOOLS,  # type: ignore[arg-type]
                                tool_choice="required", max_output_tokens=60)
    call = r.output[0]
    assert r.status == "completed" and call.type == "function_call" and call.name == "get_weather"
    assert call.call_id.startswith("call_") and json.loads(call.arguments)["city"] in ("Paris", "Rome")
    with client.responses.stream(model="tiny", input="Weather?", tools=TOOLS,  # type: ignore[arg-type]
                                 tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=60) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    for needed in ("response.output_item.added", "response.function_call_arguments.delta",
                   "response.function_call_arguments.done", "response.output_item.done", "response.completed"):
        assert needed in kinds
    streamed_call = final.output[0]
    assert streamed_call.type == "function_call" and json.loads(streamed_call.arguments)["city"] in ("Paris", "Rome")
    # the tool's result goes back through previous_response_id: the prompt extends the call's, from cache
    follow = client.responses.create(
        model="tiny", previous_response_id=r.id, tools=TOOLS, tool_choice="auto",  # type: ignore[arg-type]
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
        max_output_tokens=8)
    assert follow.output[0].type in ("message", "function_call") and follow.previous_response_id == r.id
    u0, u1 = r.usage, follow.usage
    assert u0 is not None and u1 is not None and u1.input_tokens > u0.input_tokens + u0.output_tokens
    assert u1.input_tokens_details.cached_tokens >= _reusable(u0.input_tokens)
    # the same turn sent whole (function_call item and its output) renders the same prompt
    whole = client.responses.create(
        model="tiny", tools=TOOLS, tool_choice="auto", max_output_tokens=4,  # type: ignore[arg-type]
        input=[{"role": "user", "content": "Weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert whole.usage is not None and whole.usage.input_tokens == follow.usage.input_tokens


def test_previous_response_id_extends_the_prompt_and_hits_the_cache(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    # unique instructions (several KV blocks long), so nothing of the first prompt is cached yet
    instructions = f"Session {uuid.uuid4().hex}. " + "You are the support agent of a widget store; be brief. " * 4
    first = client.responses.create(model="tiny", instructions=instructions, input="Where is order 1234?",
                                    max_output_tokens=8, extra_body=GREEDY)
    assert first.usage is not None and first.usage.input_tokens_details.cached_tokens == 0
    second = client.responses.create(model="tiny", instructions=instructions, input="And order 5678?",
                                     previous_response_id=first.id, max_output_tokens=8, extra_body=GREEDY)
    u1, u2 = first.usage, second.usage
    assert u2 is not None and second.previous_response_id == first.id
    # the follow-up's prompt holds the first prompt, its answer and the new question ...
    assert u2.input_tokens > u1.input_tokens + u1.output_tokens
    # ... and the prefix cache serves the first prompt's full 16-token blocks
    assert u2.input_tokens_details.cached_tokens >= _reusable(u1.input_tokens) > 0
    third = client.responses.create(model="tiny", instructions=instructions, input="Thanks.",
                                    previous_response_id=second.id, max_output_tokens=2, extra_body=GREEDY)
    assert third.usage is not None and third.usage.input_tokens_details.cached_tokens >= _reusable(u2.input_tokens)
    # the cached share is in the store too, and the chain is one conversation (session_id: the first id)
    rows = wait_rows(tiny_server.db_path, "SELECT attributes->>'gen_ai.response.id', cached_tokens, session_id "
                     "FROM requests WHERE attributes->>'gen_ai.response.id' IN (?, ?, ?) ORDER BY start_ns",
                     [first.id, second.id, third.id], until=lambda rows: len(rows) == 3)
    assert rows == [(first.id, 0, first.id), (second.id, u2.input_tokens_details.cached_tokens, first.id),
                    (third.id, third.usage.input_tokens_details.cached_tokens, first.id)]


def test_store_false_and_unknown_previous_ids(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    kept_out = client.responses.create(model="tiny", input="Not kept.", store=False, max_output_tokens=2)
    assert kept_out.store is False
    for rid in (kept_out.id, "resp_does_not_exist"):
        with pytest.raises(openai.NotFoundError) as nf:
            client.responses.create(model="tiny", input="Continue.", previous_response_id=rid, max_output_tokens=2)
        assert nf.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
        assert nf.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_retrieve_and_delete(tiny_server) -> None:  # type: ignore[no-untyped-def]
    client = _client(tiny_server)
    made = client.responses.create(model="tiny", input="Keep me.", max_output_tokens=3, extra_body=GREEDY)
    got = client.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == made.output_text and got.usage == made.usage
    with client.responses.stream(model="tiny", input="Keep me too.", max_output_tokens=40,
                                 text={"format": {"type": "json_schema", "name": "rating", "schema": SCHEMA}}) as s:
        streamed = s.get_final_response()
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="tiny", input="Go on.", previous_response_id=made.id, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(made.id)


@pytest.mark.parametrize(("ask", "param"), [
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input[0].content"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": "hi", "background": True}, "background"),
])
def test_bad_requests_are_400s(tiny_server, ask: dict, param: str) -> None:  # type: ignore[no-untyped-def, type-arg]
    with pytest.raises(openai.BadRequestError) as bad:
        _client(tiny_server).responses.create(model="tiny", **ask)
    assert bad.value.body["param"] == param, bad.value.body  # type: ignore[index]


def test_store_is_bounded() -> None:
    from llmtrace.backend.server.responses_store import ResponsesStore

    store = ResponsesStore(max_responses=2, max_chars=400)
    for i in range(3):
        store.put(f"resp_{i}", [{"role": "user", "content": f"turn {i}"}])
    assert store.get("resp_0") is None and store.get("resp_1") is not None and len(store) == 2
    store.put("resp_3", [{"role": "user", "content": "x"}])  # resp_1 was used last, resp_2 goes
    assert store.get("resp_2") is None and store.get("resp_1") is not None
    store.put("resp_big", [{"role": "user", "content": "y" * 350}])  # too many characters beside the others
    assert store.get("resp_big") is not None and len(store) == 1
    store.put("resp_huge", [{"role": "user", "content": "z" * 1000}])  # larger than the whole budget: not kept
    assert store.get("resp_huge") is None and store.get("resp_big") is not None
    got = store.get("resp_big")
    assert got is not None
    got[0]["content"] = "changed"  # callers get copies
    assert store.get("resp_big")[0]["content"] == "y" * 350  # type: ignore[index]
