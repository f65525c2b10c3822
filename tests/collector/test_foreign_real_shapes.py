"""The call shapes real users produce, through the real instrumentation packages (no hand-written spans):
each app runs the real openai SDK (or LiteLLM) under one package, against a loopback endpoint that answers
with cached tokens, tool calls, ``n`` choices and refusals (fake_openai_shapes.py), and sends its spans
through the stock OTLP exporter to a real ``llmtrace collect``. What the store says is compared with what
the endpoint sent:

- opentelemetry-instrumentation-openai-v2 writes a streamed call's finish reason only inside
  ``gen_ai.output.messages`` (per choice), never in ``gen_ai.response.finish_reasons``;
- a refused call (400, 429) keeps its HTTP status, which the packages leave only in the span's status message
  or the exception's class;
- OpenInference with its content switches on (OPENINFERENCE_HIDE_INPUTS/OUTPUTS) writes ``__REDACTED__`` in
  place of the text: hashed, every prompt and answer would be "the same text";
- OpenInference's Responses-API call keeps its ``max_output_tokens`` as the pass's max_tokens;
- LiteLLM with ``turn_off_message_logging`` says only ``llm.request.type=completion``: still a chat call;
  its Anthropic calls' cache writes are only inside its usage repr;
- OpenLLMetry marks every streamed chunk; an OpenAI-protocol stream opens with a role-only chunk, sent with
  the first token, so TTFT is the first chunk's time, at least the endpoint's hold-back."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_helpers import query, start_collector
from fake_openai_shapes import CACHE_WRITE, CACHED, FIRST_CHUNK_S, fake_openai_shapes

APP = Path(__file__).with_name("foreign_shapes_app.py")
# service -> (package, content capture on, calls)
APPS = {
    "v2-on": ("otel-v2", True, "stream,stream_tools,stream_n2,plain,err400,err429"),
    "oll-on": ("openllmetry", True, "stream_tools,err429"),
    "oi-off": ("openinference", False, "plain,stream,responses"),
    "ll-off": ("litellm", False, "plain,stream,err400,anthropic"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("real_shapes")
    col = start_collector(tmp)
    try:
        with fake_openai_shapes() as base_url:
            # the apps at once: each its own service name and process, the endpoint threaded; what the tests
            # assert of time (TTFT at least the endpoint's hold-back, at most the call) cannot be broken by a
            # neighbour, only made slower
            procs = {service: subprocess.Popen([sys.executable, str(APP), which, col.endpoint, base_url, service,
                                                "1" if content else "0", calls],
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for service, (which, content, calls) in APPS.items()}
            for p in procs.values():
                out, err = p.communicate(timeout=180)
                assert p.returncode == 0 and "sent" in out, out[-2000:] + err[-3000:]
        col.wait_written(sum(len(c.split(",")) for _, _, c in APPS.values()), timeout_s=60)
    finally:
        assert col.stop() == 0
    yield col.db


def _passes(db: Path, service: str, cols: str, view: str = "passes") -> list[tuple[object, ...]]:
    """Rows of the view the analyzers read (``passes``: finish reasons normalised), or of ``requests``
    (each pass span's own attributes)."""
    return query(db, f"SELECT {cols} FROM {view} WHERE service = ? ORDER BY start_ns", [service])


@pytest.mark.slow
def test_otel_v2_streamed_finish_reasons_come_from_the_output_messages(store: Path) -> None:
    rows = _passes(store, "v2-on", "status, finish_reason, prompt_tokens, output_tokens")
    ok = [r for r in rows if r[0] == "ok"]
    # stream, stream_tools, stream_n2 (both choices cut), plain: the endpoint's reasons, streamed or not
    assert [r[1] for r in ok] == ["length", "tool_calls", "length", "length"], rows
    assert {(r[2], r[3]) for r in ok} == {(40, 8)}, rows


@pytest.mark.slow
def test_refused_calls_keep_their_http_status(store: Path) -> None:
    status = "json_extract(attributes, '$.\"http.response.status_code\"')::INT"
    v2 = [r for r in _passes(store, "v2-on", f"status, {status}", "requests") if r[0] == "error"]
    assert v2 == [("error", 400), ("error", 429)], v2
    oll = [r for r in _passes(store, "oll-on", f"status, {status}", "requests") if r[0] == "error"]
    assert oll == [("error", 429)], oll
    # LiteLLM's message for a 400 has no number in it: the exception's class (BadRequestError) says it
    ll = [r for r in _passes(store, "ll-off", f"status, {status}", "requests") if r[0] == "error"]
    assert ll == [("error", 400)], ll


@pytest.mark.slow
def test_openinference_redacted_content_is_not_hashed_as_text(store: Path) -> None:
    rows = _passes(store, "oi-off", "prompt_hash, output_hash, finish_reason, cached_tokens, max_tokens")
    assert len(rows) == 3, rows
    for prompt_hash, output_hash, _, cached, max_tokens in rows:
        assert prompt_hash is None and output_hash is None, rows  # no text was sent, so no text's hash
        assert cached == CACHED and max_tokens == 8, (cached, max_tokens)
    for (attrs,) in _passes(store, "oi-off", "attributes", "requests"):
        assert "input.value.hash" not in str(attrs) and "__REDACTED__" in str(attrs)
    # chat calls carry llm.finish_reason; the Responses API's reason is only in the body the switch hid
    assert [r[2] for r in rows] == ["length", "length", None], rows


@pytest.mark.slow
def test_litellm_without_message_logging_is_still_a_chat_call(store: Path) -> None:
    rows = _passes(store, "ll-off", "operation, prompt_tokens, cached_tokens, output_tokens", "requests")
    assert rows[:2] == [("chat", 40, CACHED, 8)] * 2 and rows[2][0] == "chat", rows


@pytest.mark.slow
def test_litellm_anthropic_cache_write_tokens(store: Path) -> None:
    """LiteLLM keeps Anthropic's cache_creation_input_tokens only inside its usage repr."""
    write = "json_extract(attributes, '$.\"gen_ai.usage.cache_creation.input_tokens\"')::INT"
    rows = _passes(store, "ll-off", f"prompt_tokens, cached_tokens, {write}", "requests")
    assert rows[3] == (40, CACHED, CACHE_WRITE), rows
    assert [r[2] for r in rows[:2]] == [None, None], rows  # the OpenAI calls wrote nothing to a cache


@pytest.mark.slow
def test_openllmetry_ttft_is_the_first_tokens_not_the_opening_chunks(store: Path) -> None:
    """The stream's headers come at once; its role-only opening chunk comes with the first token,
    FIRST_CHUNK_S later (and the tool call's chunks after it)."""
    rows = _passes(store, "oll-on", "status, ttft_ms, duration_ms, finish_reason, cached_tokens")
    (ok,) = [r for r in rows if r[0] == "ok"]
    _, ttft, duration, reason, cached = ok
    assert FIRST_CHUNK_S * 1000 <= float(ttft) <= float(duration), ok  # type: ignore[arg-type]
    assert reason == "tool_calls" and cached == CACHED, ok
