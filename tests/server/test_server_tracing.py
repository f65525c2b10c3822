"""What the server records: every Arrival and server-side Intake stage once per pass, joined to the client's
trace through ``traceparent``, with the policy values (normalization, template, routing, replicas) visible."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
from server_testkit import query, stages_of, wait_rows

from llmtrace.tracer import recording as rec

SERVER_STAGES = ["arrival.connection", "arrival.admission", "arrival.model_routing", "arrival.replica_selection",
                 "arrival.stream_setup", "intake.normalization", "intake.chat_template", "intake.tokenization"]
ENGINE_STAGES = ["cache.prefix_match", "forward.prefill", "forward.decode", "gen.sampling", "gen.streaming"]


def _values(db: Path, trace_id: str, stage: str) -> dict:
    rows = query(db, "SELECT attributes FROM stages WHERE trace_id = ? AND stage = ?", [trace_id, stage])
    assert len(rows) == 1, f"{stage}: {len(rows)} spans"
    return json.loads(rows[0][0])


def test_traceparent_joins_client_and_server(tiny_server, traced) -> None:  # type: ignore[no-untyped-def]
    client_pass = rec.start_pass("tiny", side="client")
    tp = client_pass.traceparent()
    client = openai.OpenAI(base_url=f"{tiny_server.base_url}/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "joined?"}], max_tokens=3, extra_headers={"traceparent": tp})
    client_pass.end()
    assert raw.headers["x-llmtrace-trace-id"] == client_pass.trace_id
    rows = wait_rows(tiny_server.db_path, "SELECT parent_span_id, side, status FROM requests WHERE trace_id = ?",
                     [client_pass.trace_id])
    assert rows == [(client_pass.span_id, "server", "ok")]


def test_every_stage_once_with_summary_values(tiny_server) -> None:  # type: ignore[no-untyped-def]
    text = "Pay\u00a0now\u200b, p\u0430ypal"  # NBSP, zero-width space, Cyrillic а in a Latin word
    with httpx.Client(base_url=tiny_server.base_url, timeout=30) as http:
        r1 = http.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": text}],
                                                     "max_tokens": 4, "stream": True, "seed": 11, "temperature": 0.5})
        r2 = http.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                     "max_tokens": 2})
    t1, t2 = r1.headers["x-llmtrace-trace-id"], r2.headers["x-llmtrace-trace-id"]
    db = tiny_server.db_path
    wait_rows(db, "SELECT count(*) FROM stages WHERE trace_id IN (?, ?) AND stage = 'gen.streaming'", [t1, t2],
              until=lambda rows: rows[0][0] == 2)
    names = stages_of(db, t1)
    for stage in SERVER_STAGES + ENGINE_STAGES:
        assert names.count(stage) == 1, f"{stage} appears {names.count(stage)} times"
    assert len(query(db, "SELECT 1 FROM requests WHERE trace_id = ?", [t1])) == 1
    norm = _values(db, t1, "intake.normalization")
    assert norm["llmtrace.normalization.form"] == "NFC" and norm["llmtrace.normalization.strip"] is False
    assert (norm["llmtrace.normalization.invisible_chars"], norm["llmtrace.normalization.nbsp"],
            norm["llmtrace.normalization.confusables"]) == (1, 1, 1)
    tmpl = _values(db, t1, "intake.chat_template")
    assert tmpl["llmtrace.template.matches_model"] is True and len(tmpl["llmtrace.template.segment_hashes"]) >= 2
    tok = _values(db, t1, "intake.tokenization")
    n = tok["gen_ai.usage.input_tokens"]
    assert len(tok["llmtrace.tokenization.block_hashes"]) == n // 16 and tok["llmtrace.tokenization.special_tokens"] >= 4
    setup = _values(db, t1, "arrival.stream_setup")
    assert setup["llmtrace.stream.protocol"] == "sse" and setup["llmtrace.stream.first_byte_ms"] > 0
    assert _values(db, t2, "arrival.stream_setup")["llmtrace.stream.protocol"] == "none"
    # keep-alive: the second request rode the first one's connection
    assert _values(db, t1, "arrival.connection")["llmtrace.connection.reused"] is False
    assert _values(db, t2, "arrival.connection")["llmtrace.connection.reused"] is True
    row = query(db, "SELECT model, response_model, replica, prompt_tokens, output_tokens, finish_reason, seed, "
                    "temperature, ttft_ms, queue_wait_ms, prompt_hash, output_hash FROM requests WHERE trace_id = ?", [t1])[0]
    assert row[:8] == ("tiny", "tiny", "replica-0", n, 4, "length", 11, 0.5)
    assert row[8] > 0 and row[9] == 0.0 and len(row[10]) == 16 and len(row[11]) == 16


def test_a_served_pass_value_has_one_writer(traced: Path) -> None:
    # the engine's summary of a served pass leaves the server's values (what was asked, the routed model, the
    # client-side TTFT) to the server: the engine's copies are dropped, not written first and overwritten
    import llmtrace
    from llmtrace.backend.server.engine_span import SERVER_OWNED, EngineSpanView

    ps = rec.start_pass("tiny", side="server", attributes={"gen_ai.request.temperature": 0.5})
    view = EngineSpanView(ps)
    view.submitted = True
    view.set_many({"gen_ai.request.temperature": 0.0, "llmtrace.ttft_ms": 1.0, "gen_ai.usage.output_tokens": 3,
                   "gen_ai.response.model": "engine-name", "llmtrace.engine.ttft_ms": 0.5})
    ps.set("llmtrace.ttft_ms", 2.0)
    ps.end("ok")
    llmtrace.force_flush()
    attrs = json.loads(query(traced, "SELECT attributes FROM spans WHERE span_id = ?", [ps.span_id])[0][0])
    assert {"llmtrace.ttft_ms", "gen_ai.response.model", "gen_ai.request.temperature"} <= SERVER_OWNED
    assert attrs["gen_ai.request.temperature"] == 0.5 and attrs["llmtrace.ttft_ms"] == 2.0
    assert "gen_ai.response.model" not in attrs  # the server writes it when it answers
    assert attrs["gen_ai.usage.output_tokens"] == 3 and attrs["llmtrace.engine.ttft_ms"] == 0.5
