"""What the server records: every Arrival and server-side Intake stage once per pass, joined to the client's
trace through ``traceparent``, with the policy values (normalization, template, routing, replicas) visible."""

from __future__ import annotations

import json
import socket
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



def _post_from(client_port: int, server_port: int) -> str:
    """One chat request over a new connection from ``client_port`` that the server closes (Connection: close);
    the trace id it answered with."""
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", client_port))
        s.connect(("127.0.0.1", server_port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    return next(line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.startswith("x-llmtrace-trace-id"))


def test_a_new_connection_on_a_recycled_client_port_is_not_a_reused_one(tiny_server) -> None:  # type: ignore[no-untyped-def]
    """On loopback a closed ephemeral port comes back within seconds; the server read a new connection from it as
    the old one kept alive (it knew connections by the client's port). Two connections from one port, one after
    the other: both new."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    traces = [_post_from(port, tiny_server.port) for _ in range(2)]
    db = tiny_server.db_path
    wait_rows(db, "SELECT count(*) FROM stages WHERE trace_id IN (?, ?) AND stage = 'arrival.connection'", traces,
              until=lambda rows: rows[0][0] == 2)
    assert [_values(db, t, "arrival.connection")["llmtrace.connection.reused"] for t in traces] == [False, False]


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
