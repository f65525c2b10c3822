"""Bad input and faults: each gets a clear HTTP error in the API's own shape and leaves no state behind."""

from __future__ import annotations

import json

import httpx
import pytest
from server_testkit import stats, wait_idle, wait_rows

CHAT = "/v1/chat/completions"


def _post(server, path: str, content: bytes) -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.post(server.base_url + path, content=content, headers={"content-type": "application/json"},
                      timeout=30)


def _err(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json")
    return r.json()["error"]


@pytest.mark.parametrize("content, needle", [
    (b'{"model": "tiny", "messages": [', "not valid JSON"),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "not valid UTF-8"),
    (b"", "empty"),
    (b"[1, 2, 3]", "JSON object"),
    (b'{"model": "tiny"}', "'messages' is required"),
    (b'{"model": "tiny", "messages": {"role": "user"}}', "non-empty list"),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": 42}]}', "content"),
    (b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}', "'model' must be a string"),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}', "max_tokens"),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "seed": 1.5}', "seed"),
])
def test_bad_requests_are_400_with_a_clear_message(tiny_server, content: bytes, needle: str) -> None:  # type: ignore[no-untyped-def]
    r = _post(tiny_server, CHAT, content)
    assert r.status_code == 400, r.text
    assert needle in _err(r)["message"]
    assert len(r.headers["x-llmtrace-trace-id"]) == 32


def test_oversized_body_is_413(tiny_server) -> None:  # type: ignore[no-untyped-def]
    big = b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"x" * (9 << 20) + b'"}]}'
    r = _post(tiny_server, CHAT, big)
    assert r.status_code == 413 and "limit" in _err(r)["message"]


def test_image_parts_are_refused_clearly(tiny_server) -> None:  # type: ignore[no-untyped-def]
    body = {"model": "tiny", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}
    r = _post(tiny_server, CHAT, json.dumps(body).encode())
    assert r.status_code == 400 and "text only" in _err(r)["message"]


def test_anthropic_errors_use_anthropic_shape(tiny_server) -> None:  # type: ignore[no-untyped-def]
    r = _post(tiny_server, "/v1/messages", b'{"model": "tiny", "max_tokens": 5, "messages": [')
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"


def test_prompt_longer_than_context_names_the_limit(tiny_server) -> None:  # type: ignore[no-untyped-def]
    limit = httpx.get(tiny_server.base_url + "/v1/models").json()["data"][0]["max_model_len"]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "word " * (limit + 50)}]}
    r = _post(tiny_server, CHAT, json.dumps(body).encode())
    assert r.status_code == 400
    err = _err(r)
    assert str(limit) in err["message"] and err["code"] == "context_length_exceeded"


def test_routes_and_methods(tiny_server) -> None:  # type: ignore[no-untyped-def]
    assert httpx.get(tiny_server.base_url + "/v1/nothing").status_code == 404
    r = httpx.get(tiny_server.base_url + CHAT)
    assert r.status_code == 405 and "error" in r.json()
    assert httpx.get(tiny_server.base_url + "/v1/models/tiny").json()["id"] == "tiny"
    metrics = httpx.get(tiny_server.base_url + "/metrics").text
    for name in ("llmtrace_queue_depth", "llmtrace_running", "llmtrace_pool_utilization", "llmtrace_prefix_hit_rate"):
        assert name in metrics


def test_client_disconnect_mid_stream_aborts_and_frees_blocks(tiny_server) -> None:  # type: ignore[no-untyped-def]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "go on forever"}], "max_tokens": 2000,
            "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", tiny_server.base_url + CHAT, json=body) as r:
        trace_id = r.headers["x-llmtrace-trace-id"]
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen >= 4:
                break  # leave mid-stream: closing the client drops the connection
    idle = wait_idle(tiny_server.base_url)
    assert idle["admission"]["running"] == 0 and idle["admission"]["queued"] == 0
    rows = wait_rows(tiny_server.db_path, "SELECT status, output_tokens FROM requests WHERE trace_id = ?", [trace_id],
                     until=lambda rows: bool(rows))
    assert rows[0][0] == "cancelled"
    assert rows[0][1] is None or rows[0][1] < 2000


def test_no_state_leaks_after_faults(tiny_server) -> None:  # type: ignore[no-untyped-def]
    for content in (b"{", b'{"model": "tiny", "messages": []}', b"\xff"):
        _post(tiny_server, CHAT, content)
    s = wait_idle(tiny_server.base_url)
    assert s["admission"]["running"] == 0 and s["in_flight"] == 0


def test_stats_shape(tiny_server) -> None:  # type: ignore[no-untyped-def]
    s = stats(tiny_server.base_url)
    assert set(s["replicas"]) == {"replica-0"} and s["admission"]["max_running"] >= 1
