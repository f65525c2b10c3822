"""Prompt hashes of foreign spans are keyed with the store's key, so they match across collector restarts."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from collector_helpers import otlp_provider, query, start_collector
from opentelemetry.trace import SpanKind

from llmtrace.tracer import capture


def _send(endpoint: str, mark: str) -> None:
    tp = otlp_provider(endpoint, "hk")
    tp.get_tracer("t").start_span("chat m", kind=SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "mark": mark,
        "gen_ai.input.messages": "Your verification code is 482913"}).end()
    tp.shutdown()


def test_foreign_prompt_hashes_use_the_store_key(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.delenv("LLMTRACE_HASH_KEY", raising=False)  # type: ignore[attr-defined]
    for run in ("first", "second"):  # two collector processes, one after the other, on one store
        col = start_collector(tmp_path, name=run, env={"LLMTRACE_HASH_KEY": ""})
        try:
            _send(col.endpoint, run)
            col.wait_written(1)
        finally:
            assert col.stop() == 0
    rows = dict(query(tmp_path / "collected.duckdb", "SELECT attributes->>'mark', "
                                                       "attributes->>'llmtrace.prompt.hash' FROM requests"))
    assert rows["first"] == rows["second"] and len(rows["first"]) == 16
    key_file = capture.key_path(tmp_path / "collected.duckdb")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    unkeyed = hashlib.blake2b(b"Your verification code is 482913", digest_size=8).hexdigest()
    assert rows["first"] != unkeyed  # not recoverable from the store alone
    key = capture.store_key(tmp_path / "collected.duckdb")
    keyed = hashlib.blake2b(b"Your verification code is 482913", key=key, digest_size=8).hexdigest()
    assert rows["first"] == keyed
