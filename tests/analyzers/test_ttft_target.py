"""Severity is harm against the user's TTFT target (LLMTRACE_TARGET_TTFT_MS, analyzers/core/targets.py): a server
with one running slot (`serve --max-running 1`) queues a burst, and the first token waits. With no target the
queue is rated by its share of TTFT; with a target every pass met, the same queue is info (the running
limit's expected cost, no target breached); with a target the passes breached, it is above info and says how
many breached it. The real backend (tiny model) in-process, the real OpenAI SDK through ``instrument()``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from analyzers_live import client, findings, store

from llmtrace.analyzers.core.targets import TTFT_ENV

pytestmark = pytest.mark.slow

POLICY = "You answer for the Alder Street depot. Quote the parcel number and never promise a date. " * 3


def _burst(db: Path) -> None:
    from llmtrace.demo_server import InProcessServer

    with InProcessServer("tiny", "--max-running", "1") as srv, store(db, capture="hashes"):
        c = client(srv)

        def one(i: int) -> None:
            c.chat.completions.create(model=srv.model_id, max_tokens=24, temperature=0,
                                      messages=[{"role": "system", "content": POLICY},
                                                {"role": "user", "content": f"Where is parcel P-{i}?"}])

        for burst in range(2):
            threads = [threading.Thread(target=one, args=(8 * burst + i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()


def _queue(db: Path, symptom: str = "slow_first_token") -> list[object]:
    return [f for f in findings(db, symptom) if f.stage == "arrival.admission"]


def test_a_queue_is_harm_only_where_it_breaches_the_users_ttft_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.duckdb"
    _burst(db)
    monkeypatch.delenv(TTFT_ENV, raising=False)
    plain = _queue(db)
    assert plain, "the one-slot server queued the bursts"
    assert plain[0].severity != "info", plain[0]  # no target: rated by the share of TTFT spent queueing
    monkeypatch.setenv(TTFT_ENV, "600000")  # ten minutes: every pass met it
    met = _queue(db)
    assert met and met[0].severity == "info", met
    assert "Every pass stayed within the TTFT target of 600000 ms" in met[0].summary, met[0].summary
    # the goodput reading holds the passes to the same target: all within it, nothing to say under load
    assert not _queue(db, "degrades_under_traffic"), _queue(db, "degrades_under_traffic")
    monkeypatch.setenv(TTFT_ENV, "0.01")  # a target every pass breached
    breached = _queue(db)
    assert breached and breached[0].severity == "critical", breached
    assert "16 of 16 passes breached the TTFT target of 0.01 ms" in breached[0].summary, breached[0].summary
    over = [e for e in breached[0].evidence if e.label == "passes over the TTFT target"]
    assert over and over[0].value == 16, breached[0].evidence
    load = _queue(db, "degrades_under_traffic")
    assert load and load[0].severity != "info", load
    assert any(e.label == f"TTFT objective used ({TTFT_ENV})" and e.value == 0.0 for e in load[0].evidence), load
