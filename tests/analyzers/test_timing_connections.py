"""A fresh connection after a streamed call is not the client's fault: the official SDKs (httpx) do not put a
stream's connection back in the pool (measured against ``llmtrace serve``: four streamed calls on one OpenAI
client opened four connections, four plain calls one), so a clean streaming app with one client opens one a
call, and on a busy machine each connect passes the 20 ms the finding asks for. Recorded through the public
recording API as the adapters record a call; one after another, connect times fixed at 45 ms."""

from __future__ import annotations

from pathlib import Path

from analyzers_live import findings, store

from llmtrace.tracer import recording as rec

MS = 1_000_000


def _calls(tmp: Path, stream: bool) -> Path:
    with store(tmp / "t.duckdb") as db:
        t0 = rec.now_ns() - 60_000 * MS
        for i in range(6):
            s = t0 + 400 * i * MS
            p = rec.start_pass("m", side="client", start_ns=s, attributes={
                "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3, "llmtrace.ttft_ms": 80.0,
                "llmtrace.stream.requested": stream})
            rec.record_stage("arrival.connection", start_ns=s, end_ns=s + 45 * MS, parent=p, values={
                "llmtrace.connection.reused": False, "llmtrace.connection.connect_ms": 45.0})
            p.end(end_ns=s + 300 * MS)
    return db


def _connection(db: Path) -> list[str]:
    return [f"{f.severity} {f.title}" for f in findings(db, "slow_first_token") if f.stage == "arrival.connection"]


def test_streams_one_after_another_are_not_told_to_reuse_connections(tmp_path: Path) -> None:
    assert _connection(_calls(tmp_path, stream=True)) == []


def test_plain_calls_on_fresh_connections_still_are(tmp_path: Path) -> None:
    found = _connection(_calls(tmp_path, stream=False))
    assert found and found[0].startswith("warning 83% of calls open a new connection"), found
