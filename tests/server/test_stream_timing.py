"""A stream's first event comes with its first token, as the real OpenAI API and vLLM send it: the time to the
first chunk the official SDKs yield is at least the server's own TTFT (foreign instrumentations stamp "first
token" there). Each prompt is long and new (a cold prefill the clock can see) and starts with a fresh nonce,
so nothing is read from the prefix cache. Errors and cuts before the first token still give a well-formed
stream."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from server_testkit import query, wait_idle, wait_rows
from testkit import RunningServer

MARGIN_MS = 5.0  # the client's clock starts before the server's, so the slack is only for two clocks' reads


def _long_prompt() -> str:
    # ~600 tokens on the tiny model's tokenizer: a prefill of tens to hundreds of ms on these CPUs
    return f"[{uuid.uuid4().hex}] " + " ".join(f"item{i} costs {i * 7 % 97} crowns;" for i in range(120))


def _server_ttft_ms(db: Path, trace_id: str) -> float:
    rows = wait_rows(db, "SELECT ttft_ms FROM requests WHERE trace_id = ? AND ttft_ms IS NOT NULL", [trace_id])
    return float(rows[0][0])


def _first_event_ms(raw: Any, t0: float) -> tuple[float, list[Any]]:
    """Iterate the SDK's stream to its end; the time (ms since ``t0``) it yielded its first item, and the items."""
    first: float | None = None
    items = []
    for item in raw.parse():
        if first is None:
            first = (time.perf_counter() - t0) * 1000.0
        items.append(item)
    assert first is not None, "the stream yielded nothing"
    return first, items


def _check(server: RunningServer, trace_id: str, first_ms: float) -> float:
    ttft = _server_ttft_ms(server.db_path, trace_id)
    assert first_ms >= ttft - MARGIN_MS, f"the SDK's first item came at {first_ms:.1f} ms, the first token at {ttft:.1f}"
    return ttft


def test_openai_chat_role_chunk_comes_with_the_first_token(tiny_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x", max_retries=0)
    t0 = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": _long_prompt()}], max_tokens=4, stream=True,
        stream_options={"include_usage": True})
    first_ms, chunks = _first_event_ms(raw, t0)
    _check(tiny_server, raw.headers["x-llmtrace-trace-id"], first_ms)
    assert chunks[0].choices[0].delta.role == "assistant"  # still the opening chunk, only later
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.role) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_legacy_completions_echo_chunk_comes_with_the_first_token(tiny_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x", max_retries=0)
    prompt = _long_prompt()
    for echo in (True, False):
        t0 = time.perf_counter()
        raw = client.completions.with_raw_response.create(model="tiny", prompt=prompt + str(echo), max_tokens=3,
                                                          stream=True, echo=echo)
        first_ms, chunks = _first_event_ms(raw, t0)
        _check(tiny_server, raw.headers["x-llmtrace-trace-id"], first_ms)
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text.startswith(prompt + str(echo)) == echo, text[:80]


def test_responses_created_event_comes_with_the_first_token(tiny_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x", max_retries=0)
    t0 = time.perf_counter()
    raw = client.responses.with_raw_response.create(model="tiny", input=_long_prompt(), max_output_tokens=4,
                                                    stream=True)
    first_ms, events = _first_event_ms(raw, t0)
    _check(tiny_server, raw.headers["x-llmtrace-trace-id"], first_ms)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.incomplete" and [e.sequence_number for e in events] == list(range(len(events)))


def test_anthropic_message_start_comes_with_the_first_token(tiny_server: RunningServer) -> None:
    client = anthropic.Anthropic(base_url=tiny_server.base_url, api_key="x", max_retries=0)
    t0 = time.perf_counter()
    raw = client.messages.with_raw_response.create(model="tiny", max_tokens=4, stream=True,
                                                   messages=[{"role": "user", "content": _long_prompt()}])
    first_ms, events = _first_event_ms(raw, t0)
    _check(tiny_server, raw.headers["x-llmtrace-trace-id"], first_ms)
    assert events[0].type == "message_start" and events[-1].type == "message_stop", [e.type for e in events]


def test_stream_setup_ends_at_the_headers_before_prefill(tiny_server: RunningServer) -> None:
    """arrival.stream_setup is the stream's opening (its headers, the first response bytes): it ends before the
    first token, and its first_byte_ms is the headers' time, well under the TTFT of a long cold prompt."""
    with httpx.Client(base_url=tiny_server.base_url, timeout=60) as http:
        r = http.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 2, "stream": True,
                                                    "messages": [{"role": "user", "content": _long_prompt()}]})
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
    trace_id = r.headers["x-llmtrace-trace-id"]
    ttft = _server_ttft_ms(tiny_server.db_path, trace_id)
    (row,) = wait_rows(tiny_server.db_path, """
        SELECT (s.end_ns - p.start_ns) / 1e6, TRY_CAST(s.attributes->>'llmtrace.stream.first_byte_ms' AS DOUBLE)
        FROM spans s JOIN spans p ON p.span_id = s.parent_span_id
        WHERE s.trace_id = ? AND s.stage = 'arrival.stream_setup'""", [trace_id])
    setup_end_ms, first_byte_ms = row
    assert first_byte_ms <= setup_end_ms + 0.01 and setup_end_ms < ttft, (row, ttft)


def test_moderation_cut_in_the_first_tokens_is_a_well_formed_stream(tiny_server: RunningServer) -> None:
    """The moderation hook (checked every token) cuts the stream a few tokens in: the client still gets the
    role chunk first, then the content_filter finish and [DONE]. The tiny model's free text is newlines, so
    a schema makes it say the moderated word."""
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"note": {"type": "string", "enum": ["ok"]}}, "required": ["note"],
        "additionalProperties": False}}}
    body = {"model": "tiny", "max_tokens": 16, "temperature": 0, "stream": True, "response_format": fmt,
            "messages": [{"role": "user", "content": "Status?"}], "moderation": {"words": ["note"], "every_tokens": 1}}
    with httpx.Client(base_url=tiny_server.base_url, timeout=60) as http:
        r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    data = [json.loads(ln[6:]) for ln in r.text.splitlines() if ln.startswith("data: {")]
    assert data[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, data[0]
    assert data[-1]["choices"][0]["finish_reason"] == "content_filter", data[-1]
    assert r.text.rstrip().endswith("data: [DONE]")


def test_client_leaving_before_the_first_token_cancels_the_pass(tiny_server: RunningServer) -> None:
    """Headers arrive at once; a client that leaves during prefill (nothing in the body yet) cancels the
    request, its blocks return to the pool and the pass is recorded cancelled."""
    body = {"model": "tiny", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": _long_prompt() * 3}]}
    with httpx.Client(base_url=tiny_server.base_url, timeout=60) as http, \
            http.stream("POST", "/v1/chat/completions", json=body) as r:
        trace_id = r.headers["x-llmtrace-trace-id"]  # the headers came before any token
    wait_idle(tiny_server.base_url)
    rows = wait_rows(tiny_server.db_path, "SELECT status FROM spans WHERE trace_id = ? AND operation = 'chat'",
                     [trace_id])
    assert rows == [("cancelled",)], rows


def test_shutdown_during_prefill_gives_the_opening_then_the_error(tmp_path: Path) -> None:
    """The drain period ends while a long prompt is still in prefill (no token yet): the stream still opens
    the way the protocol does (the role chunk), then the shutdown error and [DONE]; the pass is recorded as
    a server shutdown with no TTFT."""
    from testkit import start_server, stop_server

    server = start_server(tmp_path, "--drain-s", "0.2")
    # ~7500 tokens, near the tiny model's 8192 context: seconds of prefill on these CPUs
    prompt = f"[{uuid.uuid4().hex}] " + " ".join(f"bay {i} holds {i * 7 % 97} crates;" for i in range(600))
    body = {"model": "tiny", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    try:
        with httpx.Client(timeout=120) as http, \
                http.stream("POST", server.base_url + "/v1/chat/completions", json=body) as r:
            trace_id = r.headers["x-llmtrace-trace-id"]  # the headers came at once
            server.process.terminate()  # SIGTERM: drain 0.2 s, then cut what still runs
            raw = list(r.iter_lines())
            lines = [ln for ln in raw if ln.startswith("data: ")]
        assert server.process.wait(timeout=60) == 0
    finally:
        stop_server(server)
    assert lines, (raw, server.log()[-3000:])
    assert json.loads(lines[0][6:])["choices"][0]["delta"] == {"role": "assistant", "content": ""}, lines[:3]
    assert "server shutdown" in json.loads(lines[-2][6:])["error"]["message"] and lines[-1] == "data: [DONE]"
    assert len(lines) == 3, lines  # nothing between: the cut came before the first token
    rows = query(server.db_path, "SELECT status, attributes->>'error.type', ttft_ms FROM requests WHERE trace_id = ?",
                 [trace_id])
    assert rows == [("error", "server_shutdown", None)], rows
