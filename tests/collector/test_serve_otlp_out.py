"""Out, too (issue 37 item 4): ``llmtrace serve --otlp-endpoint`` sends its spans over OTLP/HTTP, with the
GenAI semantic-convention names on the pass span, to any OTLP receiver; here the real ``llmtrace collect``,
in a process of its own, stands in for Langfuse, Phoenix or a stock Collector."""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai
from collector_helpers import query, start_collector
from testkit import start_server, stop_server


def test_serve_exports_its_spans_over_otlp(tmp_path: Path) -> None:
    collector = start_collector(tmp_path)
    server = start_server(tmp_path, "--otlp-endpoint", f"http://127.0.0.1:{collector.port}")
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
        r = client.chat.completions.create(model="tiny", max_tokens=4,
                                           messages=[{"role": "user", "content": "Is order 4411 shipped?"}])
        assert r.choices[0].finish_reason in {"stop", "length"}
    finally:
        stop_server(server)  # shutdown flushes the OTLP queue
    deadline = time.monotonic() + 30
    rows: list[tuple[object, ...]] = []
    while time.monotonic() < deadline and not rows:
        rows = query(collector.db, "SELECT attributes FROM spans WHERE name LIKE 'chat %'")
        time.sleep(0.2)
    collector.stop()
    assert rows, collector.log()
    attributes = json.loads(str(rows[0][0]))
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "tiny"
    assert "gen_ai.usage.input_tokens" in attributes and "gen_ai.usage.output_tokens" in attributes
    # the latencies under the names docs/integrations/engines.md's mapping table lists, in seconds
    ttft_s = attributes["llmtrace.ttft_ms"] / 1e3
    assert attributes["gen_ai.response.time_to_first_chunk"] == attributes["gen_ai.latency.time_to_first_token"]
    assert attributes["gen_ai.latency.time_to_first_token"] == ttft_s
    assert attributes["gen_ai.latency.time_in_queue"] == attributes["llmtrace.admission.queue_wait_ms"] / 1e3
    assert ttft_s > 0
    stages = {r[0] for r in query(collector.db, "SELECT DISTINCT stage FROM spans WHERE stage IS NOT NULL")}
    assert {"intake.tokenization", "cache.prefix_match", "forward.prefill", "gen.sampling"} <= stages
    assert "Is order 4411" not in json.dumps(attributes)  # hashes mode: no prompt text leaves the server
