"""Output symptoms (answers that differ, JSON cut off, mangled text, retracted text), causes planted for
real through the in-process backend and the adapters' app-side helpers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from analyzers_live import client, expect_first, findings, server, store

from llmtrace.adapters.helpers.moderation import StreamModerator
from llmtrace.adapters.helpers.stop_reason import check_stop

pytestmark = pytest.mark.slow

Q = [{"role": "user", "content": "Ticket 7731: the blender arrived broken. What are my options?"}]


def test_different_answer_at_temperature_names_sampling(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for _ in range(4):
            # the tiny random model is peaked: only a high temperature makes its samples differ
            c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=12, temperature=5.0)
    found = expect_first(db, "different_answer", "gen.sampling")
    assert any(e.label == "temperature" and e.value == 5.0 for e in found[0].evidence)


def test_different_answer_silent_when_greedy_and_alone(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for _ in range(3):
            c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=12, temperature=0)
    assert findings(db, "different_answer") == []


def test_different_answer_seeded_sampling_is_not_blamed(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for _ in range(3):
            c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=12, temperature=5.0, seed=11)
    assert [f for f in findings(db, "different_answer") if f.stage == "gen.sampling" and f.severity != "info"] == []


def _json_call(c, model: str, max_tokens: int) -> None:
    r = c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give the refund decision as JSON."}],
        max_tokens=max_tokens, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "d", "schema": {
            "type": "object", "properties": {"refund": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 12}},
            "required": ["refund", "reason"], "additionalProperties": False}}})
    check_stop(response=r, expect_json=True)


def test_broken_json_names_stop_with_length_share(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for _ in range(3):
            _json_call(c, srv.model_id, max_tokens=4)
    found = expect_first(db, "broken_json", "gen.stop")
    ev = {e.label: e for e in found[0].evidence}
    # the adapter checks the stop reason inside the pass and the app's check_stop adds its own check
    assert ev["of those, finish reason 'length'"].value >= 3
    assert ev["max_tokens"].value == 4


def test_broken_json_silent_with_room(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for _ in range(2):
            _json_call(c, srv.model_id, max_tokens=120)
    assert findings(db, "broken_json") == []


def test_refusal_after_text_names_moderation(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        stream = c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=40, temperature=0, stream=True)
        mod = StreamModerator(lambda text: len(text) > 20, every_chars=10)  # a guard that objects late
        shown = "".join(ch.choices[0].delta.content or "" for ch in mod.wrap(stream) if ch.choices)
    assert mod.aborted and shown
    expect_first(db, "refusal_after_text", "safety.moderation")


def test_refusal_after_text_silent_when_nothing_is_cut(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        stream = c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=20, temperature=0, stream=True)
        mod = StreamModerator(lambda text: False, every_chars=10)
        for _ in mod.wrap(stream):
            pass
    assert findings(db, "refusal_after_text") == []


def test_mangled_text_names_detokenization(tmp_path: Path) -> None:
    # The tiny random model emits byte-fallback tokens that do not always form whole UTF-8 characters,
    # so the final text carries U+FFFD: the detokenizer counts them.
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        texts = [c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=200, temperature=5.0,
                                           seed=s).choices[0].message.content for s in range(4)]
    if not any("\ufffd" in (t or "") for t in texts):
        pytest.skip("the tiny model produced only whole characters this time")
    expect_first(db, "mangled_text", "gen.detokenization")


def test_mangled_text_silent_on_plain_text(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        texts = [c.chat.completions.create(model=srv.model_id, messages=Q, max_tokens=6, temperature=0).choices[0].message.content]
    if any("\ufffd" in (t or "") for t in texts):
        pytest.skip("greedy output of the tiny model contains a broken character")
    assert findings(db, "mangled_text") == []


def test_slow_stream_names_batching_under_concurrency(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    # ~200-token prompts: each decode step then reads enough KV that a full batch's per-token time is clear
    # of the lone passes' by several ms (with one-line prompts the gap was ~2 ms on the tiny model's native
    # kernels, at the analyzer's noise floor, and the test failed now and then)
    fill = " Tell me about the parcel that left the depot on Monday and where it is now." * 12
    # a fresh server's first call runs cold: made before the store opens, it is not one of the lone passes
    c.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": "Warm up." + fill}],
                              max_tokens=8, temperature=0)
    with store(tmp_path / "t.duckdb") as db:
        # alone: batch of one. Eight, not four: the fast end the analyzer measures from is the 10th percentile,
        # and with four lone passes two that lost their CPU for a while (a busy machine) lifted it to where a
        # full batch no longer counted as slow
        for i in range(8):
            c.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": f"Alone {i}." + fill}],
                                      max_tokens=48, temperature=0)

        def crowd(i: int) -> None:
            c.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": f"Crowd {i}." + fill}],
                                      max_tokens=48, temperature=0)

        # a full batch (the server runs 16 at once): per-token time ~3-4x the lone passes' on the tiny model
        threads = [threading.Thread(target=crowd, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    expect_first(db, "slow_stream", "forward.batching")


def test_slow_stream_silent_one_at_a_time(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for i in range(6):
            c.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": f"Alone {i}."}],
                                      max_tokens=32, temperature=0)
    assert [f for f in findings(db, "slow_stream") if f.severity != "info"] == []
