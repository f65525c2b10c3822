"""What the middleware records about money and the provider's cache (issue 16 items 6 and 8): prices from
genai-prices with cache reads and 5-minute / 1-hour writes apart, and the providers' own cache-miss
diagnostics. Real SDKs against a scripted endpoint on loopback (hosted model names and provider-only
fields that ``llmtrace serve`` does not produce), in hashes mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import FakeProvider, Script, fake_provider, sse
from adapters_store import assert_no_text, rows, stages_of

from llmtrace.adapters import instrument

MSGS = [
    {"role": "system", "content": "You are the support agent of a parcel company. Answer briefly and politely."},
    {"role": "user", "content": "Where is my parcel with the blue sticker?"},
]


@pytest.fixture
def provider() -> Any:
    with fake_provider() as fp:
        yield fp


def _chunk(content: str | None = None, finish: str | None = None, model: str = "gpt-4o-mini") -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {"id": "c1", "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _prefix_stages(db: Path) -> list[dict[str, Any]]:
    passes = rows(db, "SELECT span_id FROM requests WHERE side='client' ORDER BY start_ns")
    return [stages_of(db, p["span_id"])["cache.prefix_match"]["attributes"] for p in passes]


# ── 8. cost per provider price list ─────────────────────────────────────────────────────────
def test_hosted_models_are_priced_by_genai_prices_with_cache_writes_apart(provider: FakeProvider, traced: Path) -> None:
    import anthropic
    import genai_prices

    usage = {"prompt_tokens": 10_000, "completion_tokens": 1_000, "total_tokens": 11_000,
             "prompt_tokens_details": {"cached_tokens": 8_000}}
    provider.scripts["/v1/chat/completions"] = Script(
        content_type="text/event-stream",
        chunks=sse(_chunk("Fine.", "stop", "gpt-5"), {"id": "c1", "model": "gpt-5", "choices": [], "usage": usage}),
    )
    oc = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
    list(oc.chat.completions.create(model="gpt-5", messages=MSGS, stream=True))
    body = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
        "content": [{"type": "text", "text": "Fine."}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 1_000, "output_tokens": 500, "cache_read_input_tokens": 20_000,
                  "cache_creation_input_tokens": 3_000,
                  "cache_creation": {"ephemeral_5m_input_tokens": 2_000, "ephemeral_1h_input_tokens": 1_000}},
    }
    provider.scripts["/v1/messages"] = Script(chunks=[json.dumps(body).encode()])
    ac = instrument(anthropic.Anthropic(api_key="test", base_url=provider.base_url, max_retries=0))
    ac.messages.create(model="claude-opus-4-5", max_tokens=600, messages=MSGS[1:])
    passes = rows(traced, "SELECT * FROM requests WHERE side='client' ORDER BY start_ns")
    gpt, claude = (stages_of(traced, p["span_id"])["meters.cache_accounting"]["attributes"] for p in passes)
    # gpt-5: $1.25 input, $0.125 cached input, $10 output per million tokens
    assert gpt["llmtrace.meters.cost_usd"] == pytest.approx((2_000 * 1.25 + 8_000 * 0.125 + 1_000 * 10) / 1e6)
    assert gpt["llmtrace.meters.price_source"] == "genai-prices"
    assert gpt["llmtrace.meters.price_version"] == f"genai-prices {genai_prices.__version__}"
    assert gpt["llmtrace.meters.price_model"] == "openai/gpt-5"
    assert gpt["llmtrace.meters.cache_read_cost_usd"] == pytest.approx(8_000 * 0.125 / 1e6)
    # claude-opus-4-5: $5 input, $0.50 cache read, $6.25 5-minute and $10 1-hour cache writes, $25 output
    assert claude["llmtrace.meters.cache_read_cost_usd"] == pytest.approx(20_000 * 0.5 / 1e6)
    assert claude["llmtrace.meters.cache_write_5m_cost_usd"] == pytest.approx(2_000 * 6.25 / 1e6)
    assert claude["llmtrace.meters.cache_write_1h_cost_usd"] == pytest.approx(1_000 * 10 / 1e6)
    expected = (1_000 * 5 + 20_000 * 0.5 + 2_000 * 6.25 + 1_000 * 10 + 500 * 25) / 1e6
    assert claude["llmtrace.meters.cost_usd"] == pytest.approx(expected) and passes[1]["cost_usd"] == pytest.approx(expected)


def test_without_genai_prices_the_bundled_table_prices_and_says_so(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys, json; sys.modules['genai_prices'] = None\n"
        "from llmtrace.adapters.helpers import meters\nfrom llmtrace.tracer.record.usage import Usage\n"
        "u = Usage(input_tokens=10**6, output_tokens=10**6, cache_read_tokens=5*10**5)\n"
        "a, b = meters.price_pass('gpt-4o-2024-08-06', u), meters.price_pass('gpt-5', u)\n"
        "print(json.dumps([a.cost, a.source, a.version, a.model, b.cost]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    cost, source, version, model, unknown = json.loads(out)
    assert cost == pytest.approx(0.5 * 2.5 + 0.5 * 1.25 + 10.0) and (source, model) == ("bundled", "gpt-4o")
    assert version == "prices.json 2026-11-29" and unknown is None


def test_a_user_price_file_wins_over_genai_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmtrace.adapters.helpers import meters
    from llmtrace.tracer.record.usage import Usage

    own = tmp_path / "prices.json"
    own.write_text('{"_version": "negotiated 2026-10", "gpt-5": {"input": 1.0, "output": 2.0}}')
    monkeypatch.setenv("LLMTRACE_PRICES", str(own))
    meters.load_prices()
    try:
        p = meters.price_pass("gpt-5", Usage(input_tokens=10**6, output_tokens=10**6))
        assert (p.cost, p.source, p.version) == (3.0, "user", "negotiated 2026-10")
        assert meters.price_pass("o3", Usage(input_tokens=10**6, output_tokens=0)).source == "genai-prices"
    finally:
        monkeypatch.delenv("LLMTRACE_PRICES")
        meters.load_prices()


# ── 6. provider cache diagnostics ───────────────────────────────────────────────────────────
def _anthropic_message(msg_id: str, diagnostics: object) -> bytes:
    return json.dumps({
        "id": msg_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Checking."}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3_000, "output_tokens": 5, "cache_read_input_tokens": 0},
        "diagnostics": diagnostics,
    }).encode()


def test_anthropic_cache_diagnostics_are_read_and_asked_for(provider: FakeProvider, traced: Path) -> None:
    import anthropic

    miss = {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 2_900}}
    provider.scripts["/v1/messages"] = Script(chunks=[_anthropic_message("msg_2", miss)])
    bare = instrument(anthropic.Anthropic(api_key="test", base_url=provider.base_url, max_retries=0))
    bare.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MSGS[1:], diagnostics={"previous_message_id": "msg_1"})
    # Asked for by the middleware: null on the conversation's first call, then the previous response's id.
    asking = instrument(
        anthropic.Anthropic(api_key="test", base_url=provider.base_url, max_retries=0), cache_diagnostics=True
    )
    first = [{"role": "user", "content": "Where is parcel 4471?"}]
    provider.scripts["/v1/messages"] = Script(chunks=[_anthropic_message("msg_10", None)])
    r = asking.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=first)
    provider.scripts["/v1/messages"] = Script(chunks=[_anthropic_message("msg_11", {"cache_miss_reason": None})])
    second = first + [{"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": "And now?"}]
    asking.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=second)
    sent = [json.loads(body) for _, _, body in provider.requests]
    assert sent[0]["diagnostics"] == {"previous_message_id": "msg_1"}  # the app's own, untouched
    assert sent[1]["diagnostics"] == {"previous_message_id": None}
    assert sent[2]["diagnostics"] == {"previous_message_id": "msg_10"}
    prefixes = _prefix_stages(traced)
    assert (prefixes[0]["llmtrace.cache.miss_reason"], prefixes[0]["llmtrace.cache.missed_tokens"]) == ("tools_changed", 2_900)
    assert "llmtrace.cache.miss_reason" not in prefixes[1]  # no comparison was possible
    assert prefixes[2]["llmtrace.cache.miss_reason"] == "pending"
    assert_no_text(traced, "Where is parcel 4471?", "Checking.")


def test_openai_prompt_cache_diagnostics_from_a_responses_stream(provider: FakeProvider, traced: Path) -> None:
    def stream(resp_id: str, diag: object) -> list[bytes]:
        done = {"id": resp_id, "object": "response", "model": "gpt-5.6", "status": "completed", "output": [],
                "usage": {"input_tokens": 2_000, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0}},
                "prompt_cache_diagnostics": diag}
        return sse({"type": "response.created", "response": {"id": resp_id, "model": "gpt-5.6"}},
                   {"type": "response.output_text.delta", "delta": "Ok."},
                   {"type": "response.completed", "response": done}, done=False)

    client = instrument(
        openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0), cache_diagnostics=True
    )
    provider.scripts["/v1/responses"] = Script(content_type="text/event-stream", chunks=stream("resp_1", None))
    turn = [{"role": "user", "content": "Where is parcel 4471?"}]
    list(client.responses.create(model="gpt-5.6", input=turn, stream=True))
    miss = {"type": "cache_miss", "reason": "input_changed", "cache_missed_tokens": 1_800}
    provider.scripts["/v1/responses"] = Script(content_type="text/event-stream", chunks=stream("resp_2", miss))
    turn = turn + [{"role": "assistant", "content": "Ok."}, {"role": "user", "content": "And now?"}]
    list(client.responses.create(model="gpt-5.6", input=turn, stream=True))
    sent = [json.loads(body) for _, _, body in provider.requests]
    assert "prompt_cache_options" not in sent[0]
    assert sent[1]["prompt_cache_options"] == {"comparison_response_id": "resp_1"}
    prefixes = _prefix_stages(traced)
    assert (prefixes[1]["llmtrace.cache.miss_reason"], prefixes[1]["llmtrace.cache.missed_tokens"]) == ("input_changed", 1_800)
    assert_no_text(traced, "Where is parcel 4471?")
