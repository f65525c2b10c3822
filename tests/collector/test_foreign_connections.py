"""Fresh connections are blamed on the client only when a pooled one was idle. Spans of another process,
in llmtrace's own names, sent by the stock OTel SDK and OTLP exporter to a real ``llmtrace collect`` with
timings set exactly: a burst of concurrent calls (each needs a connection of its own) is no finding; the
same calls one after another, each on a new connection, are a warning that counts all but the first."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from collector_helpers import otlp_provider, start_collector
from opentelemetry import trace
from opentelemetry.trace import SpanKind

MS = 1_000_000


def _send(endpoint: str, service: str, starts_ms: list[int], call_ms: int) -> None:
    tp = otlp_provider(endpoint, service)
    tracer = tp.get_tracer("app")
    t0 = time.time_ns() - 60_000 * MS
    for i, start in enumerate(starts_ms):
        s, e = t0 + start * MS, t0 + (start + call_ms) * MS
        span = tracer.start_span("chat m", kind=SpanKind.CLIENT, start_time=s, attributes={
            "gen_ai.operation.name": "chat", "llmtrace.side": "client", "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3, "call": i})
        ctx = trace.set_span_in_context(span)
        tracer.start_span("arrival.connection", context=ctx, start_time=s, attributes={
            "llmtrace.stage": "arrival.connection", "llmtrace.phase": "arrival", "llmtrace.connection.reused": False,
            "llmtrace.connection.connect_ms": 45.0}).end(end_time=s + 45 * MS)
        span.end(end_time=e)
    tp.shutdown()


def _findings(db: Path, service: str) -> list[dict[str, object]]:
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "diagnose", "--db", str(db), "--service", service,
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout)["findings"])


@pytest.mark.slow
def test_concurrent_calls_are_not_told_to_reuse_connections(tmp_path: Path) -> None:
    col = start_collector(tmp_path)
    try:
        _send(col.endpoint, "burst", [3 * i for i in range(6)], 900)  # six calls in flight together
        _send(col.endpoint, "reconnect", [400 * i for i in range(6)], 300)  # one at a time, a new connection each
        col.wait_written(24)
    finally:
        assert col.stop() == 0
    assert not [f for f in _findings(col.db, "burst") if f["stage"] == "arrival.connection"]
    (conn,) = [f for f in _findings(col.db, "reconnect") if f["stage"] == "arrival.connection"]
    assert conn["severity"] == "warning" and conn["title"].startswith("83% of calls open a new connection"), conn
