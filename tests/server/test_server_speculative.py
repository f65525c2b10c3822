"""Speculative decoding through the public faces: ``llmtrace serve --speculative`` and the per-request
``speculative`` field (OpenAI ``extra_body``, the same field on Anthropic, completions and responses), with the
engine's ``gen.speculation`` values in the store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anthropic
import openai
import pytest
from server_testkit import wait_rows
from testkit import RunningServer, start_server, stop_server

MSG = [{"role": "user", "content": "red green blue red green blue red green blue"}]
GREEDY = {"temperature": 0, "ignore_eos": True}
SPEC_SQL = ("SELECT attributes->>'llmtrace.spec.method', CAST(attributes->>'llmtrace.spec.k' AS INT), "
            "CAST(attributes->>'llmtrace.spec.drafted' AS INT), CAST(attributes->>'llmtrace.spec.accepted' AS INT), "
            "CAST(attributes->>'llmtrace.spec.batch_size' AS DOUBLE) FROM stages "
            "WHERE trace_id = ? AND stage = 'gen.speculation'")


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("spec-server"), "--speculative", "draft", "--speculative-k", "3")
    try:
        yield server
    finally:
        stop_server(server)


def _chat(server: RunningServer, **extra: object) -> tuple[str, str]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=MSG, max_tokens=24,  # type: ignore[arg-type]
                                                           extra_body={**GREEDY, **extra})
    return raw.headers["x-llmtrace-trace-id"], raw.parse().choices[0].message.content or ""


def _spec(server: RunningServer, trace_id: str) -> tuple[str, int, int, int, float]:
    return wait_rows(server.db_path, SPEC_SQL, [trace_id])[0]  # type: ignore[return-value]


def test_server_flag_is_the_default_and_requests_override_it(spec_server: RunningServer) -> None:
    tid, text = _chat(spec_server)  # no field: the server's --speculative draft --speculative-k 3
    method, k, drafted, accepted, _ = _spec(spec_server, tid)
    assert (method, k) == ("self_draft", 3) and drafted > 0 and 0 <= accepted <= drafted
    tid_off, text_off = _chat(spec_server, speculative="off")
    assert _spec(spec_server, tid_off)[:3] == ("none", 0, 0)
    tid_ng, text_ng = _chat(spec_server, speculative={"method": "ngram", "k": 5})
    method, k, drafted, accepted, _ = _spec(spec_server, tid_ng)
    assert (method, k) == ("ngram", 5) and drafted > 0 and 0 <= accepted <= drafted
    # greedy speculation is exact: drafts only change how many tokens a step commits, never which
    assert text == text_off == text_ng and text_off


def test_per_request_field_on_the_default_server(tiny_server: RunningServer) -> None:
    tid, _ = _chat(tiny_server)
    assert _spec(tiny_server, tid)[:3] == ("none", 0, 0)  # the server default is off
    tid, _ = _chat(tiny_server, speculative="ngram")
    method, k, drafted, _, _ = _spec(tiny_server, tid)
    assert (method, k) == ("ngram", 4) and drafted > 0
    # the Anthropic SDK sends the same field (extra_body), and so does the legacy completions endpoint
    a = anthropic.Anthropic(base_url=tiny_server.base_url, api_key="unused", max_retries=0)
    raw = a.messages.with_raw_response.create(model="tiny", max_tokens=16, messages=MSG,  # type: ignore[arg-type]
                                              extra_body={**GREEDY, "speculative": "draft"})
    assert _spec(tiny_server, raw.headers["x-llmtrace-trace-id"])[0] == "self_draft"
    o = openai.OpenAI(base_url=f"{tiny_server.base_url}/v1", api_key="unused", max_retries=0)
    raw_c = o.completions.with_raw_response.create(model="tiny", prompt="a b a b a b", max_tokens=12,
                                                   extra_body={**GREEDY, "speculative": True})
    assert _spec(tiny_server, raw_c.headers["x-llmtrace-trace-id"])[0] == "ngram"
    raw_r = o.responses.with_raw_response.create(model="tiny", input="a b a b a b", max_output_tokens=12,
                                                 extra_body={**GREEDY, "speculative": {"method": "ngram", "k": 2}})
    assert _spec(tiny_server, raw_r.headers["x-llmtrace-trace-id"])[:2] == ("ngram", 2)


def test_bad_speculative_values_are_400s(tiny_server: RunningServer) -> None:
    o = openai.OpenAI(base_url=f"{tiny_server.base_url}/v1", api_key="unused", max_retries=0)
    for bad in ("eagle", {"method": "ngram", "k": 0}, {"method": "ngram", "k": 99}, 3):
        with pytest.raises(openai.BadRequestError) as err:
            o.chat.completions.create(model="tiny", messages=MSG, max_tokens=2,  # type: ignore[arg-type]
                                      extra_body={"speculative": bad})
        assert err.value.body["param"] == "speculative", bad  # type: ignore[index]


def test_speculation_under_load_is_recorded(spec_server: RunningServer) -> None:
    """Concurrent speculating requests: each pass records that it speculated while others ran beside it."""

    async def burst() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{spec_server.base_url}/v1", api_key="unused", max_retries=0)
        async with client:
            raws = await asyncio.gather(*[client.chat.completions.with_raw_response.create(
                model="tiny", max_tokens=32, messages=[{"role": "user", "content": f"{i} x y x y x y"}],
                extra_body={"ignore_eos": True, "temperature": 0, "speculative": "ngram"}) for i in range(6)])
        return [r.headers["x-llmtrace-trace-id"] for r in raws]

    trace_ids = asyncio.run(burst())
    batch_sizes = [_spec(spec_server, t)[4] for t in trace_ids]
    assert all(_spec(spec_server, t)[0] == "ngram" for t in trace_ids)
    assert max(batch_sizes) > 1.0, batch_sizes
