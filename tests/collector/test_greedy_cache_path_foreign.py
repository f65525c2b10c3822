"""T=0 answers that differ by the prefix-cache path, on a hosted provider's spans (issue 35 item 4): OTel GenAI
chat spans (content captured) of one prompt asked one at a time, the first cold and the rest served cached
prompt tokens, the cold answer differing from the cached ones. Sent by the stock OTLP exporter to the real
collector; ``diagnose`` puts the difference down to the prefix-cache path (cache.prefix_match), says no batch
was recorded, and does not name batches. The same traffic with one answer throughout raises nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

from collector_helpers import diagnose_service, otlp_provider, start_collector

SYSTEM = "You answer for the Harrow parcel depot from the scan log; never promise a delivery day. " * 6


def _ask(tracer: object, t0: int, cached: int, answer: str) -> None:
    msgs = [{"role": "system", "parts": [{"type": "text", "content": SYSTEM}]},
            {"role": "user", "parts": [{"type": "text", "content": "Where is parcel HX-4410?"}]}]
    out = [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]
    span = tracer.start_span("chat depot-8b", start_time=t0, attributes={  # type: ignore[attr-defined]
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "depot-8b",
        "gen_ai.response.model": "depot-8b", "gen_ai.request.temperature": 0.0, "gen_ai.request.max_tokens": 40,
        "gen_ai.usage.input_tokens": 420, "gen_ai.usage.output_tokens": 12,
        "gen_ai.usage.cache_read.input_tokens": cached, "gen_ai.input.messages": json.dumps(msgs),
        "gen_ai.output.messages": json.dumps(out), "gen_ai.response.finish_reasons": ["stop"]})
    span.end(end_time=t0 + 400_000_000)


def test_greedy_answers_by_the_cache_path_are_not_put_down_to_batches(tmp_path: Path) -> None:
    col = start_collector(tmp_path)
    try:
        t0 = time.time_ns() - 600 * 10**9
        for service, cold_answer in (("depot", "It left Leeds at 09:40; it is on the van now."),
                                     ("depot-twin", "It left Leeds at 09:40 and is on the van.")):
            tp = otlp_provider(col.endpoint, service)
            tracer = tp.get_tracer("opentelemetry.instrumentation.openai_v2")
            for k in range(5):
                _ask(tracer, t0 + k * 2 * 10**9, 0 if k == 0 else 384,
                     cold_answer if k == 0 else "It left Leeds at 09:40 and is on the van.")
            tp.force_flush()
            tp.shutdown()
        col.wait_written(10)
        found = diagnose_service(col.db, "depot")
        twin = diagnose_service(col.db, "depot-twin")
    finally:
        col.stop()
    drift = [f for f in found if "different_answer" in f["symptoms"]]
    assert [f["stage"] for f in drift] == ["cache.prefix_match"], [(f["stage"], f["title"]) for f in found]
    assert "depending on the prefix-cache path" in drift[0]["title"], drift[0]["title"]
    assert "no batch was recorded" in drift[0]["summary"] and "batch of one" not in drift[0]["summary"]
    cached = [e for e in drift[0]["evidence"] if e["label"] == "cached prompt tokens seen"]
    assert cached and cached[0]["value"] == [0, 384], drift[0]["evidence"]
    assert not [f for f in found if f["stage"] == "forward.batching"], found
    assert not [f for f in twin if "different_answer" in f["symptoms"]], twin
