"""Failed calls are first-class: each way a call fails, made with the real OpenAI SDK through ``instrument()`` against
real sockets (the scripted provider, a server that never answers, a port nobody listens on), is a pass with its
error kind, status and a scrubbed message, and ``llmtrace diagnose`` names each kind at its stage with the message,
ranked with the rest by the share of calls that failed."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, FakeProvider, Script, fake_provider, sse
from adapters_store import rows
from testkit import diagnose_json, free_port

from llmtrace.adapters import instrument

MSGS = [{"role": "user", "content": "Where is my parcel?"}]
# an OpenAI-shaped 401 that quotes the key, as the real API does: it must never reach the store
LEAKED_KEY = "sk-proj-Zq81mXwL4vTn0pRs7bYc2dKe9fGh3jAa"


def _error(status: int, message: str, type_: str, code: str | None = None) -> Script:
    return Script(status, chunks=[json.dumps({"error": {"message": message, "type": type_, "code": code}}).encode()])


def _chunk(content: str) -> dict[str, Any]:
    return {"id": "c1", "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": content},
                                                             "finish_reason": None}]}


@contextmanager
def silent_server() -> Iterator[str]:
    """A real listening socket that accepts connections and never answers: a provider that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:  # closed: the test is over
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
        for conn in held:
            conn.close()


def _client(base_url: str, **kw: Any) -> openai.OpenAI:
    return instrument(openai.OpenAI(api_key="sk-test", base_url=base_url, max_retries=0, **kw))


def _fail(call: Any) -> None:
    with pytest.raises(openai.OpenAIError):
        call()


def _stream(client: openai.OpenAI) -> None:
    for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MSGS, stream=True):
        pass


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with fake_provider() as fp:
        yield fp


def _record_every_kind(fp: FakeProvider) -> None:
    chat = "/v1/chat/completions"
    fp.scripts["/ok" + chat] = Script(chunks=[CHAT_OK])
    fp.scripts["/rl" + chat] = _error(429, "Rate limit reached for gpt-4o-mini in organization org-1 on requests "
                                           "per min (RPM): Limit 3, Used 3.", "requests", "rate_limit_exceeded")
    fp.scripts["/auth" + chat] = _error(401, f"Incorrect API key provided: {LEAKED_KEY}. You can find your API key "
                                             "at https://platform.openai.com/account/api-keys.",
                                        "invalid_request_error", "invalid_api_key")
    fp.scripts["/boom" + chat] = _error(500, "The server had an error while processing your request.", "server_error")
    fp.scripts["/cut" + chat] = Script(content_type="text/event-stream", cut_after=2,
                                       chunks=sse(*[_chunk(f"w{i} ") for i in range(6)]))
    fp.scripts["/slow" + chat] = Script(content_type="text/event-stream", delay_s=0.6,
                                        chunks=sse(_chunk("slow"), _chunk("er")))
    ok = _client(f"{fp.base_url}/ok/v1")
    for _ in range(4):
        ok.chat.completions.create(model="gpt-4o-mini", messages=MSGS)
    limited = _client(f"{fp.base_url}/rl/v1")
    for _ in range(2):
        _fail(lambda: limited.chat.completions.create(model="gpt-4o-mini", messages=MSGS))
    auth = _client(f"{fp.base_url}/auth/v1")
    _fail(lambda: auth.chat.completions.create(model="gpt-4o-mini", messages=MSGS))
    boom = _client(f"{fp.base_url}/boom/v1")
    _fail(lambda: boom.chat.completions.create(model="gpt-4o-mini", messages=MSGS))
    _fail(lambda: _stream(_client(f"{fp.base_url}/cut/v1")))
    _fail(lambda: _stream(_client(f"{fp.base_url}/slow/v1", timeout=openai.Timeout(5.0, read=0.2))))
    with silent_server() as hung:
        hanging = _client(f"{hung}/v1", timeout=openai.Timeout(5.0, read=0.3))
        _fail(lambda: hanging.chat.completions.create(model="gpt-4o-mini", messages=MSGS))
    refused = _client(f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    _fail(lambda: refused.chat.completions.create(model="gpt-4o-mini", messages=MSGS))


def _by_kind(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The failed-calls findings by their error kind (a merged finding keeps its evidence)."""
    out: dict[str, dict[str, Any]] = {}
    for f in found:
        if "failed_calls" in f["symptoms"]:
            for ev in f["evidence"]:
                if ev["label"] == "error kind":
                    out[str(ev["value"])] = f
    return out


def _messages(f: dict[str, Any]) -> str:
    return " | ".join(str(ev["value"]) for ev in f["evidence"] if ev["label"] == "message")


def test_every_kind_of_failure_is_named_at_its_stage(provider: FakeProvider, traced: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _record_every_kind(provider)
    failed = rows(traced, "SELECT status, status_message, attributes FROM requests WHERE status = 'error'")
    assert len(failed) == 8, failed
    assert all(r["status_message"] for r in failed)  # every failed pass says why
    # the key the provider quoted is scrubbed from the stored message and from every other column
    dump = json.dumps(rows(traced, "SELECT * FROM spans"), default=str)
    assert LEAKED_KEY not in dump and LEAKED_KEY[:12] not in dump
    assert any("Incorrect API key provided: [REDACTED" in r["status_message"] for r in failed)

    found = diagnose_json(traced, capsys)
    kinds = _by_kind(found)
    expected = {"rate_limited": "arrival.admission", "auth": "arrival.connection", "server_error": "forward.prefill",
                "stream_cut": "gen.streaming", "stream_timeout": "gen.streaming", "timeout": "arrival.stream_setup",
                "connection_error": "arrival.connection"}
    assert {k: kinds[k]["stage"] for k in expected if k in kinds} == expected, [(f["stage"], f["title"]) for f in found]
    assert "429" in kinds["rate_limited"]["title"] and "Rate limit reached" in _messages(kinds["rate_limited"])
    assert "[REDACTED" in _messages(kinds["auth"]) and LEAKED_KEY not in json.dumps(found)
    assert "server had an error" in _messages(kinds["server_error"])
    assert "RemoteProtocolError" in _messages(kinds["stream_cut"])
    assert "ReadTimeout" in _messages(kinds["stream_timeout"]) and "ReadTimeout" in _messages(kinds["timeout"])
    assert "ConnectError" in _messages(kinds["connection_error"])
    # ranked with the rest by harm: the rate limit (2 of 12 calls) is the worst, above one-off failures
    share = {k: f["loss"]["share_of_passes"] for k, f in kinds.items()}
    assert share["rate_limited"] == pytest.approx(2 / 12, abs=1e-3) and share["auth"] == pytest.approx(1 / 12, abs=1e-3)
    failures = [f for f in found if "failed_calls" in f["symptoms"]]
    assert failures[0] is kinds["rate_limited"] and failures[0]["severity"] == "warning"


def test_a_clean_run_has_no_failure_finding(provider: FakeProvider, traced: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    provider.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
    client = _client(f"{provider.base_url}/v1")
    for _ in range(3):
        client.chat.completions.create(model="gpt-4o-mini", messages=MSGS)
    assert rows(traced, "SELECT count(*) AS n FROM requests")[0]["n"] == 3  # (flushes the store)
    assert not [f for f in diagnose_json(traced, capsys) if "failed_calls" in f["symptoms"]]
