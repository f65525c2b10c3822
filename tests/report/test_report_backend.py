"""The report on the bundled backend's own spans: a real `llmtrace serve` (the tiny test model) with a KV pool
small enough to evict, real requests over HTTP, then the page's pool chart replays what the engine recorded."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from report_helpers import write_report
from testkit import start_server, stop_server

from llmtrace.tracer.storage.store import read_store


@pytest.mark.slow
def test_pool_chart_from_the_bundled_backends_eviction_records(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--num-blocks", "24")
    try:
        topics = ["orders", "refunds", "shipping", "returns"]
        with httpx.Client(base_url=server.base_url, timeout=120) as http:
            for round_ in range(2):  # the second round asks again for prefixes the small pool had to evict
                for topic in topics:
                    system = f"You are the {topic} desk. " + " ".join(f"{topic}-rule-{i}." for i in range(24))
                    r = http.post("/v1/chat/completions", json={
                        "model": "tiny", "max_tokens": 4, "temperature": 0,
                        "messages": [{"role": "system", "content": system},
                                     {"role": "user", "content": f"question {round_}"}]})
                    assert r.status_code == 200, r.text
    finally:
        stop_server(server)  # flushes the server's spans
    with read_store(server.db_path) as conn:
        evicted = conn.execute("""SELECT sum(TRY_CAST(json_extract_string(attributes,
            '$."llmtrace.eviction.blocks_evicted"') AS BIGINT)) FROM spans WHERE stage = 'cache.eviction'""").fetchone()[0]
    assert evicted and evicted > 0, "the pool never evicted: the test needs a smaller --num-blocks"
    out = tmp_path / "report.html"
    assert write_report(["report", "--db", str(server.db_path), "-o", str(out)]) == 0
    html = out.read_text()
    pool = html[html.index('id="kv-pool"'):html.index('id="traces"')]
    assert 'data-chart="kv-pool"' in pool and "Replay of the 8 newest passes" in pool
    assert f"{evicted:,} blocks evicted" in pool
