"""Process-wide state sits behind one object, ``llmtrace.tracer.record.runtime.runtime`` (issue 34), and one
call, ``runtime.clear()``, returns the process to how it started: the tracing set-up shut down (its spans
stored), the default capture mode, a new hash key, nothing remembered of earlier prompts, the price tables
read again and no running trace cost. Real parts: a DuckDB store written through ``llmtrace.init`` and the
recording API, a user price file read by ``load_prices``."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

import llmtrace
from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading.memory import memory
from llmtrace.tracer.record import capture, lifecycle, prices
from llmtrace.tracer.record.runtime import runtime
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


def test_every_process_wide_state_is_a_part_of_the_runtime() -> None:
    assert {"tracing", "capture", "reading", "prices"} <= set(runtime.parts)
    assert runtime.parts["reading"] is memory
    assert runtime.parts["prices"].trace_costs is prices.trace_costs  # type: ignore[attr-defined]


def test_one_call_forgets_what_the_process_holds(store_path: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMTRACE_HASH_KEY", raising=False)
    monkeypatch.delenv("LLMTRACE_PRICES", raising=False)
    user_prices = tmp_path / "prices.json"
    user_prices.write_text(json.dumps({"house-model-7": {"input": 1.0, "output": 2.0}}))

    llmtrace.init(db=store_path, service_name="svc", capture="full")
    with rec.start_pass("house-model-7", side="server") as p, rec.stage(S.CACHE_PREFIX_MATCH,
                                                                        {N.PREFIX_HIT_TOKENS: 8}, parent=p):
        pass
    store_hash = capture.hash_text("the same words")
    memory.prompts.observe("template", [("system", "You answer in French."), ("user", "Bonjour")])
    prices.load_prices(user_prices)
    prices.trace_costs.add(p.trace_id, 0.25)
    assert (capture.mode(), lifecycle.current_settings() is not None) == ("full", True)
    assert "house-model-7" in prices.price_table() and memory.prompts.kept_chars > 0

    runtime.clear()

    # the set-up is shut down, its spans stored; recording goes nowhere until the next init
    assert lifecycle.current_settings() is None and lifecycle.force_flush()
    con = duckdb.connect(str(store_path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (2,)
    finally:
        con.close()
    assert capture.mode() == "hashes"
    assert capture.hash_text("the same words") != store_hash  # a key of this process, not the store's
    assert memory.prompts.kept_chars == 0
    assert "house-model-7" not in prices.price_table()  # the bundled table again, read anew
    assert prices.trace_costs.get(p.trace_id) == 0.0

    # the next init takes up the store's key again: hashes match the store's earlier ones
    llmtrace.init(db=store_path, service_name="svc")
    try:
        assert capture.hash_text("the same words") == store_hash
    finally:
        runtime.clear()
