"""Causes the bundled backend cannot produce, because it gets them right: a detokenizer that holds back
too little, greedy decoding that drifts with the batch, and a provider's impossible usage. The spans are
recorded through the public recording API exactly as a server (or an adapter) with that fault would
record them — the same stage ids, boundary values and pass-span summary values."""

from __future__ import annotations

from pathlib import Path

from analyzers_live import expect_first, findings, stages, store

from llmtrace.tracer import recording as rec


def _server_pass(prompt_hash: str, output_hash: str, *, temperature: float = 0.0, composition: str = "c1",
                 invariant: bool = False, stop: str | None = None, stop_hold: int = 0, held: int = 4,
                 repl: int = 0) -> None:
    p = rec.start_pass("smollm2", side="server", attributes={
        "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 20, "gen_ai.request.temperature": temperature,
        "gen_ai.response.model": "smollm2", "gen_ai.response.finish_reasons": ["stop"],
        "llmtrace.prompt.hash": prompt_hash, "llmtrace.output.hash": output_hash,
        "llmtrace.batch.composition_hash": composition, "llmtrace.ttft_ms": 30.0, "llmtrace.tpot_ms": 20.0})
    t = rec.now_ns()
    rec.record_stage("forward.batching", start_ns=t, end_ns=t + 1000, parent=p, values={
        "llmtrace.batch.size_mean": 3.0, "llmtrace.batch.composition_hash": composition,
        "llmtrace.batch.invariant_mode": invariant})
    rec.record_stage("gen.stop", start_ns=t, end_ns=t + 1000, parent=p, values={
        "gen_ai.response.finish_reasons": ["stop"], "llmtrace.stop.matched": stop})
    rec.record_stage("gen.detokenization", start_ns=t, end_ns=t + 1000, parent=p, values={
        "llmtrace.detok.held_back_max": held, "llmtrace.detok.replacement_chars": repl,
        "llmtrace.detok.skip_special_tokens": True, "llmtrace.detok.stop_holdback_chars": stop_hold})
    p.end()


def test_different_answer_at_temperature_zero_names_batching(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        for i, comp in enumerate(("c1", "c2", "c3")):
            _server_pass("p1", f"o{i % 2}", composition=comp)
    found = expect_first(db, "different_answer", "forward.batching")
    comps = next(e for e in found[0].evidence if e.label == "batch compositions seen").value
    assert comps == ["c1", "c2", "c3"]


def test_different_answer_in_invariant_mode_is_not_blamed_on_batching(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        for i, comp in enumerate(("c1", "c2")):
            _server_pass("p1", f"o{i}", composition=comp, invariant=True)
        for comp in ("c1", "c2"):
            _server_pass("p2", "same", composition=comp)
    assert "forward.batching" not in stages(findings(db, "different_answer"))


def test_detokenizer_window_names_detokenization_for_a_chopped_stop(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        _server_pass("p1", "o1", stop="</answer>", stop_hold=2)
        _server_pass("p2", "o2", held=0, repl=2)
    found = findings(db, "detokenizer_window")
    assert [f.stage for f in found] == ["gen.detokenization", "gen.detokenization"]
    assert "stop string" in found[0].title and "without holding back" in found[1].title


def test_detokenizer_window_silent_when_the_window_fits(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        _server_pass("p1", "o1", stop="</answer>", stop_hold=8)
        _server_pass("p2", "o2", stop="<|im_end|>", stop_hold=0)  # an end token is not streamed text
        _server_pass("p3", "o3", held=2, repl=0)
    assert findings(db, "detokenizer_window") == []


def _client_pass(inp: int, cached: int, out: int = 10, max_tokens: int = 64) -> None:
    with rec.start_pass("gpt-x", side="client", attributes={
            "gen_ai.usage.input_tokens": inp, "gen_ai.usage.cache_read.input_tokens": cached,
            "gen_ai.usage.output_tokens": out, "gen_ai.request.max_tokens": max_tokens}):
        pass


def test_usage_invariants_flag_impossible_totals(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        _client_pass(100, 80)
        _client_pass(100, 250)  # cached counted on top of input, as a provider that adds them would report
        _client_pass(100, 0, out=90, max_tokens=64)
    found = [f for f in findings(db, "cost_after_deploy") if f.stage == "meters.cache_accounting"]
    titles = " | ".join(f.title for f in found)
    assert "cached tokens exceed input tokens" in titles and "more output tokens than max_tokens" in titles


def test_usage_invariants_silent_on_consistent_usage(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        _client_pass(100, 80)
        _client_pass(120, 0)
    assert findings(db, "cost_after_deploy") == []


def test_preempted_passes_name_the_block_allocation(tmp_path: Path) -> None:
    # an engine whose KV pool ran dry preempts sequences (the bundled one rarely does at test sizes): two of
    # three passes preempted, at 90% and 100% of the pool, make one finding quoting both numbers
    with store(tmp_path / "t.duckdb") as db:
        for preemptions, utilization in ((1, 0.9), (2, 1.0), (0, 0.4)):
            p = rec.start_pass("smollm2", side="server", attributes={
                "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 20})
            t = rec.now_ns()
            rec.record_stage("cache.block_allocation", start_ns=t, end_ns=t + 1000, parent=p, values={
                "llmtrace.blocks.preemptions": preemptions, "llmtrace.blocks.utilization": utilization})
            p.end()
    found = [f for f in findings(db, "degrades_under_traffic") if f.stage == "cache.block_allocation"]
    assert [(f.severity, f.title) for f in found] == [("warning", "2 passes were preempted when the KV pool ran dry")]
    assert [(e.label, e.value) for e in found[0].evidence] == [("preempted passes", 2),
                                                              ("median pool utilization", 0.95)]
    assert found[0].next_check == "Lower max_running or grow the KV pool." and len(found[0].trace_ids) == 2
