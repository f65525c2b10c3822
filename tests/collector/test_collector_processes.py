"""Real processes: several apps exporting to one collector while a reader opens the store; SIGTERM; kill -9."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest
from collector_helpers import count_spans, query, start_collector

APP = textwrap.dedent("""
    import sys, time
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    endpoint, app, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tp = TracerProvider(resource=Resource.create({"service.name": app}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=30),
                                             max_queue_size=n + 1, max_export_batch_size=512,
                                             schedule_delay_millis=20))
    t = tp.get_tracer("app")
    for i in range(n):
        with t.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat",
                                                           "gen_ai.request.model": "m", "i": i}):
            pass
        if i % 250 == 249:
            time.sleep(0.05)  # spans keep arriving for a second or so, over several of the collector's writes
    tp.shutdown()
    print("sent", n)
""")

READER = textwrap.dedent("""
    import os, sys, time
    from llmtrace.tracer.storage.store import read_connection
    db, stop_file = sys.argv[1], sys.argv[2]
    seen = []
    while not os.path.exists(stop_file):
        with read_connection(db, timeout_s=30) as conn:
            n = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
            conn.execute("SELECT model, count(*) FROM requests GROUP BY model").fetchall()
        assert not seen or n >= seen[-1], (n, seen)  # committed spans never go away
        if not seen:
            print("reading", flush=True)  # the senders start now, not while this process still imports
        seen.append(n)
        time.sleep(0.05)
    print(" ".join(map(str, seen)))
""")


@pytest.mark.slow
def test_several_apps_and_a_reader_lose_no_span(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "reader.py").write_text(READER)
    col = start_collector(tmp_path)
    apps, per_app = 4, 5000
    try:
        stop_file = tmp_path / "stop-reading"
        reader = subprocess.Popen([sys.executable, str(tmp_path / "reader.py"), str(col.db), str(stop_file)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # wait for the reader's first read: on a busy machine its imports could otherwise outlast all the
        # sending, and it would only ever see the finished store (a race of the test, not of the collector)
        assert reader.stdout is not None
        first = reader.stdout.readline()
        assert first.strip() == "reading", first + reader.stdout.read()
        senders = [subprocess.Popen([sys.executable, str(tmp_path / "app.py"), col.endpoint, f"app{i}",
                                     str(per_app)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for i in range(apps)]
        for p in senders:
            out, _ = p.communicate(timeout=90)
            assert p.returncode == 0 and f"sent {per_app}" in out, out
        col.wait_written(apps * per_app)
        stop_file.touch()
        out, _ = reader.communicate(timeout=60)
        assert reader.returncode == 0, out
        seen = [int(x) for x in out.split()]
        # the reader got in between the collector's writes, more than once, while spans were arriving
        assert len({n for n in seen if 0 < n < apps * per_app}) >= 2, seen
    finally:
        assert col.stop() == 0
    rows = query(col.db, "SELECT service, count(*), count(DISTINCT span_id) FROM spans GROUP BY 1 ORDER BY 1")
    assert rows == [(f"app{i}", per_app, per_app) for i in range(apps)]
    assert query(col.db, "SELECT count(*) FROM requests") == [(apps * per_app,)]


def _post_batches(endpoint: str, batches: int, per: int = 512) -> int:
    from test_collector_bad_input import PB, _request

    with httpx.Client() as client:
        for b in range(batches):
            r = client.post(endpoint, content=_request(per, b + 1).SerializeToString(), headers=PB)
            assert r.status_code == 200, r.text
    return batches * per


def test_sigterm_writes_everything_accepted(tmp_path: Path) -> None:
    # a long pause between writes, so most of what was accepted is still in memory at SIGTERM
    col = start_collector(tmp_path, "--flush-interval", "60")
    sent = _post_batches(col.endpoint, 1)
    col.wait_written(sent)  # the first batch is written at once, then the writer pauses
    sent += _post_batches(col.endpoint, 20)
    stats = col.stats()
    assert stats["spans_accepted"] == sent and stats["rows_queued"] == sent - 512
    assert col.stop(signal.SIGTERM, timeout_s=30) == 0
    assert count_spans(col.db) == sent


def test_kill_9_mid_load_loses_no_acknowledged_span(tmp_path: Path) -> None:
    """A 200 means durable: a collector killed with SIGKILL while three senders push batches (and with most
    of what it acknowledged still queued, not committed) loses none of them; the next start replays its
    write-ahead log, once: no span twice."""
    from test_collector_bad_input import PB, _request

    col = start_collector(tmp_path, "--flush-interval", "0.5")
    acked: list[int] = []
    stop = threading.Event()

    def sender(k: int) -> None:
        with httpx.Client(timeout=10) as client:
            for b in range(1000):
                if stop.is_set():
                    return
                seed = k * 10_000 + b + 1
                try:
                    r = client.post(col.endpoint, content=_request(256, seed).SerializeToString(), headers=PB)
                except httpx.HTTPError:
                    return  # the collector died under us: this one was not acknowledged
                if r.status_code == 200:
                    acked.append(seed)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 30 and time.monotonic() < deadline:
        time.sleep(0.02)
    col.process.send_signal(signal.SIGKILL)
    col.process.wait(timeout=10)
    stop.set()
    for t in threads:
        t.join(timeout=20)
    assert len(acked) >= 30
    committed = count_spans(col.db)
    col2 = start_collector(tmp_path, db=col.db, name="collect2")
    try:
        assert "replayed" in col2.log()
    finally:
        assert col2.stop() == 0
    rows = query(col.db, "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans")
    stored_ids = {int(t, 16) for (t,) in query(col.db, "SELECT DISTINCT trace_id FROM spans")}
    missing = [seed for seed in acked if seed * 1_000_000 + 1 not in stored_ids]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged batches lost (store had {committed})"
    assert rows[0][0] == rows[0][1] >= len(acked) * 256  # nothing twice
    assert not list((tmp_path / "collected.duckdb.collect-wal").glob("*.wal"))  # replayed, then removed
