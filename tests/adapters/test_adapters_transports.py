"""Transports the app brings (issue 14 item 16): ``httpx.MockTransport`` on a sync client, and transports
that hand back responses whose body is already read. Every call is recorded, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from adapters_store import assert_no_text, rows

from llmtrace.adapters import instrument
from llmtrace.adapters.middleware.transport import AsyncInstrumentedTransport, InstrumentedTransport

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your parcel is in Oslo."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
}
MSGS = [{"role": "user", "content": "Where is my parcel with the blue sticker?"}]


def _handler(request: httpx.Request) -> httpx.Response:
    assert json.loads(request.content)["messages"] == MSGS
    return httpx.Response(200, json=ANSWER)  # a body given as content: httpx has already read it


def _passes(db: Path) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")


def test_mock_transport_on_a_sync_client_is_recorded(traced: Path) -> None:
    http = instrument(httpx.Client(transport=httpx.MockTransport(_handler)))
    assert isinstance(http._transport, InstrumentedTransport)  # not the async wrapper: the client is sync
    r = http.post("https://api.openai.com/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": MSGS})
    assert r.json() == ANSWER
    ahttp = instrument(httpx.AsyncClient(transport=httpx.MockTransport(_handler)))
    assert isinstance(ahttp._transport, AsyncInstrumentedTransport)
    (p,) = _passes(traced)
    assert (p["status"], p["output_tokens"], p["finish_reason"]) == ("ok", 6, "stop")
    assert_no_text(traced, MSGS[0]["content"], "Your parcel is in Oslo.")


@pytest.mark.parametrize("n", [120])
def test_already_read_responses_are_each_recorded_once(traced: Path, n: int) -> None:
    client = instrument(
        openai.OpenAI(
            api_key="sk-test",
            base_url="https://api.openai.com/v1",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(_handler)),
        )
    )
    for _ in range(n):
        r = client.chat.completions.create(model="gpt-4o-mini", messages=MSGS)
        assert r.choices[0].message.content == "Your parcel is in Oslo."
    passes = _passes(traced)
    assert len(passes) == n and all(p["status"] == "ok" and p["output_tokens"] == 6 for p in passes)


async def test_async_mock_transport_with_already_read_bodies(traced: Path) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=ANSWER)

    client = instrument(
        openai.AsyncOpenAI(
            api_key="sk-test",
            base_url="https://api.openai.com/v1",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        )
    )
    for _ in range(5):
        await client.chat.completions.create(model="gpt-4o-mini", messages=MSGS)
    passes = _passes(traced)
    assert [p["status"] for p in passes] == ["ok"] * 5 and all(p["cost_usd"] is not None for p in passes)


def _http_modules() -> list[Any]:
    """httpx and its successor httpx2 (the newest openai and anthropic majors run on httpx2): both when installed."""
    import importlib

    found = []
    for name in ("httpx", "httpx2"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


@pytest.mark.parametrize("http", _http_modules(), ids=lambda m: m.__name__)
def test_sdk_clients_on_either_http_library_are_recorded(traced: Path, http: Any) -> None:
    def handler(request: Any) -> Any:
        assert json.loads(request.content)["messages"] == MSGS
        return http.Response(200, json=ANSWER)

    client = instrument(
        openai.OpenAI(
            api_key="sk-test",
            base_url="https://api.openai.com/v1",
            max_retries=0,
            timeout=openai.Timeout(5.0, read=2.0),
            http_client=http.Client(transport=http.MockTransport(handler)),
        )
    )
    r = client.chat.completions.create(model="gpt-4o-mini", messages=MSGS)
    assert r.choices[0].message.content == "Your parcel is in Oslo."
    (p,) = _passes(traced)
    assert (p["status"], p["output_tokens"], p["finish_reason"]) == ("ok", 6, "stop")

