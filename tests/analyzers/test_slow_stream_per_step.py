"""The KV bytes a slow stream is blamed on are bytes per decode step, as TPOT is time per token: passes that
generated more tokens read more KV in all without any step reading more (a raised max_tokens), and that is
no reason for a slow stream. Recorded through the public recording API as the server records a pass."""

from __future__ import annotations

from pathlib import Path

from analyzers_live import findings, store

from llmtrace.tracer import recording as rec


def _pass(tpot_ms: float, steps: int, kv_per_step: int) -> None:
    p = rec.start_pass("smollm2", side="server", attributes={
        "gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": steps, "llmtrace.ttft_ms": 30.0,
        "llmtrace.tpot_ms": tpot_ms, "gen_ai.response.model": "smollm2", "gen_ai.response.finish_reasons": ["stop"]})
    t = rec.now_ns()
    rec.record_stage("forward.batching", start_ns=t, end_ns=t + 1000, parent=p, values={"llmtrace.batch.size_mean": 1.0})
    rec.record_stage("forward.decode", start_ns=t, end_ns=t + 1000, parent=p, values={
        "llmtrace.decode.steps": steps, "llmtrace.decode.tpot_ms": tpot_ms,
        "llmtrace.decode.kv_bytes_read": steps * kv_per_step})
    p.end()


def _store(tmp: Path, slow_kv_per_step: int) -> Path:
    """Eight fast passes of 4 tokens, eight slow ones of 24 (slow for a reason the spans do not hold)."""
    with store(tmp / "t.duckdb") as db:
        for i in range(8):
            _pass(2.0 + i * 0.01, 4, 1000)
            _pass(9.0 + i * 0.01, 24, slow_kv_per_step)
    return db


def test_more_tokens_are_not_more_kv_per_step(tmp_path: Path) -> None:
    found = findings(_store(tmp_path, 1000), "slow_stream")
    assert [f.title for f in found if f.stage == "forward.decode" and f.severity != "info"] == []


def test_more_kv_per_step_is_still_named(tmp_path: Path) -> None:
    found = findings(_store(tmp_path, 4000), "slow_stream")
    assert found and found[0].stage == "forward.decode" and "per decode step" in found[0].title, found
