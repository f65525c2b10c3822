"""``instrument()`` on the frameworks that hold an SDK client: LangChain's ChatOpenAI / ChatAnthropic and
LiteLLM, the real packages against the real ``llmtrace serve`` (tiny model), in hashes mode."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from adapters_store import assert_no_text, rows

from llmtrace.adapters import instrument, is_instrumented, uninstrument

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM must not fetch its price map

QUESTION = "Where is my parcel with the blue sticker?"


def _passes(db: Path) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")


def test_langchain_chat_openai_invoke_and_stream(tiny_server: Any, traced: Path) -> None:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="tiny", api_key="sk-test", base_url=f"{tiny_server.base_url}/v1", max_retries=0, max_tokens=6
    )
    assert instrument(model) is model and is_instrumented(model)
    answer = model.invoke(QUESTION)
    streamed = list(model.stream(QUESTION))
    passes = _passes(traced)
    assert [(p["provider"], p["status"]) for p in passes] == [("openai", "ok")] * 2
    assert passes[0]["output_tokens"] == answer.usage_metadata["output_tokens"]
    assert passes[1]["output_tokens"] == 6 and passes[1]["attributes"]["llmtrace.usage.source"] == "provider"
    assert all(c.usage_metadata is None for c in streamed)  # the usage chunk the middleware asked for stays hidden
    assert_no_text(traced, QUESTION)
    uninstrument(model)
    assert not is_instrumented(model)


async def test_langchain_chat_anthropic_sync_and_async(tiny_server: Any, traced: Path) -> None:
    from langchain_anthropic import ChatAnthropic

    model = ChatAnthropic(model="tiny", api_key="test", base_url=tiny_server.base_url, max_retries=0, max_tokens=4)
    instrument(model)
    model.invoke(QUESTION)
    await model.ainvoke(QUESTION)
    passes = _passes(traced)
    assert [(p["provider"], p["status"]) for p in passes] == [("anthropic", "ok")] * 2
    assert all(p["output_tokens"] is not None for p in passes)
    assert_no_text(traced, QUESTION)


@pytest.fixture
def litellm() -> Iterator[Any]:
    import litellm as lib

    before = (lib.client_session, lib.aclient_session)
    yield lib
    uninstrument(lib)
    lib.client_session, lib.aclient_session = before
    lib.in_memory_llm_clients_cache.flush_cache()


async def test_litellm_completion_sync_stream_and_async(tiny_server: Any, traced: Path, litellm: Any) -> None:
    instrument(litellm)
    assert is_instrumented(litellm)
    kw: dict[str, Any] = dict(
        model="openai/tiny",
        api_base=f"{tiny_server.base_url}/v1",
        api_key="sk-test",
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=5,
    )
    r = litellm.completion(**kw)
    chunks = list(litellm.completion(stream=True, **kw))
    await litellm.acompletion(**kw)
    passes = _passes(traced)
    assert [p["status"] for p in passes] == ["ok"] * 3 and all(p["model"] == "tiny" for p in passes)
    assert passes[0]["output_tokens"] == r.usage.completion_tokens
    assert passes[1]["output_tokens"] == 5 and chunks
    assert_no_text(traced, QUESTION)


def test_what_cannot_be_wrapped_says_what_to_pass() -> None:
    with pytest.raises(ValueError, match="LangChain ChatOpenAI or ChatAnthropic, or the litellm module"):
        instrument(object())
    import types

    with pytest.raises(ValueError, match="cannot instrument requests"):
        instrument(types.ModuleType("requests"))
