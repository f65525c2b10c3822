"""Hypothesis against the real ``llmtrace serve``: malformed and hostile bodies, JSON shapes, parameters,
headers and raw bytes on every generation route. Whatever arrives: no 5xx, every error in its API's shape,
no hang (each request has a bounded timeout), the server healthy afterwards, and a good request running
alongside the whole time keeps every one of its pass spans.

Bounded: FUZZ_EXAMPLES (default 100) examples per test, about 20 s of requests in all on a 2-core machine."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_testkit import wait_idle, wait_rows
from testkit import RunningServer, start_server, stop_server

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/messages"]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("fuzz"), "--header-timeout-s", "3", "--body-timeout-s", "5")
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def http(fuzzed: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzzed.base_url, timeout=20) as c:
        yield c


class GoodTraffic:
    """Good chat requests, one after another on their own connection, while the fuzzing runs."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.trace_ids: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as c:
            i = 0
            while not self._stop.is_set():
                i += 1
                r = c.post("/v1/chat/completions", json={
                    "model": "tiny", "max_tokens": 3, "stream": i % 2 == 0,
                    "messages": [{"role": "user", "content": f"good request {i}"}]})
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text[:200]}")
                else:
                    self.trace_ids.append(r.headers["x-llmtrace-trace-id"])
                time.sleep(0.05)

    def __enter__(self) -> GoodTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


@pytest.fixture(scope="module")
def good(fuzzed: RunningServer) -> Iterator[GoodTraffic]:
    with GoodTraffic(fuzzed.base_url) as g:
        yield g


# ───────────────────────────────────────────────────────────── strategies
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", "tiny", "\u200b", "\x00", "<|im_start|>", "\ud800", "{{ 7*7 }}", "a" * 300])
_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63, max_value=2**200)
            | st.floats(allow_nan=False, allow_infinity=False) | _text)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(_text, inner, max_size=4), max_leaves=12)
_message = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "function", "bogus"]) | _json,
    "content": _text | _json | st.lists(st.fixed_dictionaries({"type": st.sampled_from(
        ["text", "image_url", "tool_use", "tool_result", "input_audio", "weird"]) | _json}, optional={
        "text": _text | _json, "content": _json, "input": _json, "name": _json, "id": _json}), max_size=3),
    "tool_calls": _json | st.lists(st.fixed_dictionaries({"function": _json | st.fixed_dictionaries(
        {"name": _text | _json, "arguments": _text | _json})}), max_size=2),
    "name": _json, "tool_call_id": _json,
})
_schema = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["integer", "number", "string", "boolean", "null", "object",
                                                     "array", "nonsense"]) | _json},
                          optional={"minimum": _json | st.integers(), "maximum": st.integers(), "enum": _json,
                                    "pattern": _text, "maxLength": _json}),
    lambda inner: st.fixed_dictionaries({"type": st.just("object")}, optional={
        "properties": st.dictionaries(_text, inner, max_size=3), "required": _json, "items": inner}),
    max_leaves=6)
_fields: dict[str, Any] = {
    "model": _text | _json, "messages": st.lists(_message, max_size=3) | _json, "prompt": _text | _json,
    "system": _text | _json, "stream": st.booleans() | _json, "stream_options": _json,
    "temperature": _json, "top_p": _json, "top_k": _json, "min_p": _json, "seed": _json, "n": _json,
    "stop": _json, "stop_sequences": _json, "stop_token_ids": _json, "logprobs": _json, "top_logprobs": _json,
    "echo": _json, "ignore_eos": _json, "repetition_penalty": _json, "frequency_penalty": _json,
    "tools": _json | st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": _json}), max_size=2),
    "tool_choice": _json, "input_schema": _json,
    "response_format": _json | st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema":
                                                      st.fixed_dictionaries({"name": _text, "schema": _schema})}),
    "output_config": _json | st.fixed_dictionaries({"format": st.fixed_dictionaries(
        {"type": st.just("json_schema"), "schema": _schema})}),
    "max_tokens": _json, "max_completion_tokens": _json,
}
_bodies = st.fixed_dictionaries({}, optional=_fields)


def _bounded(body: dict[str, Any]) -> dict[str, Any]:
    """Keep generation short: a usable token cap is made small (a huge valid one would only run long)."""
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 4:
            body[key] = 4
    if "max_tokens" not in body and body.get("messages") is not None:
        body["max_tokens"] = 4
    return body


def _check(r: httpx.Response, path: str) -> None:
    assert r.status_code < 500, f"{r.status_code} on {path}: {r.text[:500]}"
    if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json") and \
            r.request.method != "HEAD":
        body = r.json()
        assert isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str), body
        if path.startswith("/v1/messages"):
            assert body["type"] == "error", body


def _send(http: httpx.Client, path: str, content: bytes, headers: dict[str, str] | None = None) -> None:
    with http.stream("POST", path, content=content,
                     headers={"content-type": "application/json", **(headers or {})}) as r:
        r.read()  # a stream too: it must end within the client's timeout
    _check(r, path)


# ───────────────────────────────────────────────────────────── the tests
@FUZZ
@given(path=st.sampled_from(ROUTES), body=_bodies)
def test_fuzzed_json_bodies(http: httpx.Client, good: GoodTraffic, path: str, body: dict[str, Any]) -> None:
    _send(http, path, json.dumps(_bounded(body)).encode())


@FUZZ
@given(path=st.sampled_from(ROUTES), raw=st.binary(max_size=300) | st.sampled_from([
    b"[" * 50000, b'{"a":' * 5000, b'{"max_tokens": ' + b"9" * 6000 + b"}", b"\xef\xbb\xbf{}", b"null",
    b'{"model": "tiny\\ud800"}', b'{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 1}',
    b'{"a": NaN}', b'{"a": 1e999}', b'{"model": "tiny", "model": 5}']))
def test_fuzzed_raw_bytes(http: httpx.Client, good: GoodTraffic, path: str, raw: bytes) -> None:
    _send(http, path, raw)


_header_value = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
                        max_size=60)


@settings(FUZZ, max_examples=max(1, EXAMPLES // 2))
@given(path=st.sampled_from([*ROUTES, "/v1/models", "/v1/models/x%00y", "/health", "/stats", "/metrics",
                             "/v1/../etc/passwd", "/v1/chat/completions/extra"]),
       method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
       headers=st.dictionaries(st.sampled_from(["content-type", "authorization", "x-api-key", "traceparent",
                                                "accept", "x-llmtrace-foo", "content-encoding", "expect"]),
                               _header_value, max_size=4),
       body=st.sampled_from([b"", b"{}", b'{"model": "tiny", "max_tokens": 2, "messages": '
                             b'[{"role": "user", "content": "hi"}]}']))
def test_fuzzed_headers_and_methods(http: httpx.Client, good: GoodTraffic, path: str, method: str,
                                    headers: dict[str, str], body: bytes) -> None:
    raw = [(k.encode(), v.encode("latin-1")) for k, v in headers.items()
           if k != "expect" or v.lower() != "100-continue"]
    r = http.request(method, path, content=body if method not in ("GET", "HEAD") else None, headers=raw)
    _check(r, path)


# Integer fields as a hostile client sends them. A whole float passed the integer check (max_tokens 1e308 became
# a 309-digit budget and ran to the context window for a minute); OpenAI's and Anthropic's APIs refuse floats.
_BASE: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "tiny", "max_tokens": 2, "prompt": "hi"},
    "/v1/messages": {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "tiny", "max_output_tokens": 2, "input": "hi"},
}
_INT_FIELDS = [("/v1/chat/completions", f) for f in ("max_tokens", "max_completion_tokens", "n", "top_k", "seed",
                                                     "top_logprobs")] + [
    ("/v1/completions", "max_tokens"), ("/v1/completions", "logprobs"), ("/v1/completions", "seed"),
    ("/v1/messages", "max_tokens"), ("/v1/messages", "top_k"), ("/v1/responses", "max_output_tokens")]
_NOT_INTEGERS = [1e308, 2.0, 2.5, -0.0, True, False, "2", [2], 2**63, -(2**63) - 1]  # (10**400: the body parser refuses)


@pytest.mark.parametrize(("path", "field"), _INT_FIELDS)
def test_integer_fields_refuse_floats_bools_and_absurd_values(http: httpx.Client, path: str, field: str) -> None:
    for value in _NOT_INTEGERS + ([2**31, 10**30] if "max" in field else []):
        body = {**_BASE[path], field: value}
        t0 = time.monotonic()
        r = http.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
        took = time.monotonic() - t0
        _check(r, path)
        assert r.status_code == 400, (path, field, repr(value)[:40], r.status_code, r.text[:300])
        assert field in r.json()["error"]["message"], r.text[:300]
        assert took < 10, f"{path} {field}={repr(value)[:40]} took {took:.1f}s to refuse"


def test_integer_fields_at_their_bounds_still_run(http: httpx.Client) -> None:
    chat = {**_BASE["/v1/chat/completions"], "seed": 2**63 - 1, "top_k": 1000, "n": 1}
    r = http.post("/v1/chat/completions", json=chat)
    assert r.status_code == 200, r.text[:300]
    r = http.post("/v1/completions", json={**_BASE["/v1/completions"], "logprobs": 2, "seed": -(2**63)})
    assert r.status_code == 200, r.text[:300]
    r = http.post("/v1/messages", json={**_BASE["/v1/messages"], "top_k": 1000})
    assert r.status_code == 200 and r.json()["stop_reason"] in ("end_turn", "max_tokens"), r.text[:300]


@pytest.mark.parametrize("framing", [b"Content-Length: 2\r\nContent-Length: 40\r\n",
                                     b"Content-Length: 40\r\nContent-Length: 40\r\n",
                                     b"Content-Length: 40\r\nTransfer-Encoding: chunked\r\n"])
def test_conflicting_framing_is_400(fuzzed: RunningServer, framing: bytes) -> None:
    """What ``llmtrace collect`` was made to match: one body, one end, or 400 (raw socket, no client tidying)."""
    body = b'{"model": "tiny", "max_tokens": 1, "messages": []}'
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing +
           b"\r\n" + body)
    with socket.create_connection(("127.0.0.1", fuzzed.port), timeout=10) as s:
        s.sendall(raw)
        data = s.recv(4096)
    assert data.split(b" ", 2)[1] == b"400", data[:300]


def test_healthy_afterwards_and_no_good_span_lost(fuzzed: RunningServer, http: httpx.Client,
                                                  good: GoodTraffic) -> None:
    """Runs last in this module: the good traffic went on during every fuzz test above."""
    assert http.get("/health").status_code == 200
    r = http.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 2,
                                                "messages": [{"role": "user", "content": "still fine?"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    good.__exit__()
    assert not good.failures, good.failures[:5]
    assert len(good.trace_ids) >= 5
    wait_idle(fuzzed.base_url)
    ids = good.trace_ids
    rows = wait_rows(fuzzed.db_path, f"SELECT trace_id, status FROM spans WHERE operation = 'chat' AND trace_id "
                     f"IN ({', '.join('?' * len(ids))})", ids, until=lambda rows: len(rows) >= len(ids))
    assert sorted(t for t, _ in rows) == sorted(ids) and all(s == "ok" for _, s in rows)
    assert "Traceback" not in fuzzed.log(), fuzzed.log()[-3000:]
