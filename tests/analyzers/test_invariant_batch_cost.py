"""Severity is harm: on a server batch-invariant on purpose (`llmtrace serve --batch-invariant`), streams in a
burst are slower per token than alone. That is the setting's expected cost: the slow-stream finding that names
batching is info, and only a TPOT target the user set (LLMTRACE_TARGET_TPOT_MS) that the streams breach raises
it. The real backend (tiny model) in-process, the real OpenAI SDK through ``instrument()``, streamed bursts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from analyzers_live import client, findings, store

from llmtrace.analyzers.core.targets import TPOT_ENV

pytestmark = pytest.mark.slow

POLICY = "Policy: refunds are accepted within 30 days of delivery with the receipt. " * 4


def _traffic(db: Path) -> None:
    from llmtrace.demo_server import InProcessServer

    with InProcessServer("tiny", "--batch-invariant") as srv, store(db, capture="hashes"):
        c = client(srv)

        def one(i: int) -> None:
            for _ in c.chat.completions.create(model=srv.model_id, max_tokens=24, temperature=0, stream=True,
                                               messages=[{"role": "system", "content": POLICY},
                                                         {"role": "user", "content": f"Status of order {i}?"}]):
                pass

        for burst in range(2):
            threads = [threading.Thread(target=one, args=(10 * burst + i,)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for k in range(3):
                one(100 + 3 * burst + k)


def test_a_batch_invariant_burst_is_the_settings_cost_unless_a_target_is_breached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.duckdb"
    _traffic(db)
    monkeypatch.delenv(TPOT_ENV, raising=False)
    found = findings(db, "slow_stream")
    batching = [f for f in found if f.stage == "forward.batching"]
    assert batching, [(f.stage, f.title) for f in found]  # the bursts did stream slower, in bigger batches
    assert all(f.severity == "info" for f in batching), [(f.severity, f.title) for f in batching]
    assert "batch-invariant kernels on purpose" in batching[0].summary, batching[0].summary
    monkeypatch.setenv(TPOT_ENV, "0.001")  # a target every stream breaches
    raised = [f for f in findings(db, "slow_stream") if f.stage == "forward.batching"]
    assert raised and raised[0].severity != "info" and "breach the TPOT target" in raised[0].summary, raised
