"""A server with every policy flag set (2 replicas round-robin, NFKC with invisible characters stripped, a
chat-template override, an alias, one running slot and no queue): the policies show in the stages; the
limits shed with 429; and, last, SIGTERM drains it (running streams finish, new requests get 503)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from server_testkit import query, wait_rows
from testkit import RunningServer, start_server, stop_server

CHAT = "/v1/chat/completions"


def _err(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json")
    return r.json()["error"]


def _values(db: Path, trace_id: str, stage: str) -> dict:
    rows = query(db, "SELECT attributes FROM stages WHERE trace_id = ? AND stage = ?", [trace_id, stage])
    assert len(rows) == 1, f"{stage}: {len(rows)} spans"
    return json.loads(rows[0][0])


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("policy-server")
    template = tmp / "template.jinja"
    template.write_text("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    server = start_server(tmp, "--replicas", "2", "--routing", "round_robin", "--normalize", "nfkc",
                          "--strip-invisible", "--chat-template", str(template), "--alias", "gpt-4o-mini=tiny",
                          "--max-running", "1", "--max-queued", "0",
                          # the shutdown test's stream must finish inside the drain, on a busy machine too
                          "--drain-s", "150")
    yield server
    stop_server(server)


@pytest.mark.slow
def test_policies_are_recorded(policy_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=f"{policy_server.base_url}/v1", api_key="unused", max_retries=0)
    traces = []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "\uff21\u200bB"}], max_tokens=2)
        assert raw.parse().model == "tiny"
        traces.append(raw.headers["x-llmtrace-trace-id"])
    db = policy_server.db_path
    wait_rows(db, "SELECT count(*) FROM stages WHERE stage = 'gen.streaming' AND trace_id IN (?, ?)", traces,
              until=lambda rows: rows[0][0] == 2)
    routing = _values(db, traces[0], "arrival.model_routing")
    assert (routing["gen_ai.request.model"], routing["gen_ai.response.model"], routing["llmtrace.routing.rule"]) == \
        ("gpt-4o-mini", "tiny", "alias")
    norm = _values(db, traces[0], "intake.normalization")
    assert norm["llmtrace.normalization.form"] == "NFKC" and norm["llmtrace.normalization.strip"] is True
    assert norm["llmtrace.normalization.chars_changed"] == 2  # the zero-width space removed, the fullwidth A folded
    assert _values(db, traces[0], "intake.chat_template")["llmtrace.template.matches_model"] is False
    replicas = [_values(db, t, "arrival.replica_selection") for t in traces]
    assert {r["llmtrace.replica.id"] for r in replicas} == {"replica-0", "replica-1"}
    assert all(r["llmtrace.replica.policy"] == "round_robin" and r["llmtrace.replica.candidates"] == 2 for r in replicas)


@pytest.mark.slow
def test_shed_then_graceful_shutdown(policy_server: RunningServer) -> None:
    """Runs last in this module: it stops the server."""
    server = policy_server
    url = server.base_url + CHAT
    # 1000 tokens: ~4 s of the tiny model's CPU, ten times the half second from the first chunk to the late
    # request; that the stream still ran then is checked below, not assumed (3000 took ~30 s at load 13-19)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "long answer"}], "max_tokens": 1000,
            "stream": True, "ignore_eos": True}
    first_chunk = threading.Event()
    result: dict[str, object] = {}

    def stream() -> None:
        lines = []
        with httpx.stream("POST", url, json=body, timeout=60) as r:
            result["trace_id"] = r.headers["x-llmtrace-trace-id"]
            for line in r.iter_lines():
                if line.startswith("data: "):
                    lines.append(line)
                    first_chunk.set()
        result["lines"] = lines
        result["ended"] = time.monotonic()

    t = threading.Thread(target=stream)
    t.start()
    assert first_chunk.wait(30)
    # Full: one running, no queue -> 429 with Retry-After and an OpenAI-style body.
    shed = httpx.post(url, json={**body, "stream": False, "max_tokens": 2}, timeout=30)
    assert shed.status_code == 429 and int(shed.headers["retry-after"]) >= 1
    assert _err(shed)["type"] == "rate_limit_exceeded"
    # Shutdown while the stream runs: new requests get 503, the stream finishes.
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    late = httpx.post(url, json={**body, "stream": False, "max_tokens": 2}, timeout=30)
    assert late.status_code == 503 and "shutting down" in _err(late)["message"]
    refused_at = time.monotonic()
    t.join(150)  # the drain's length: the stream finishes inside it or is cut at its end
    lines = result["lines"]
    assert isinstance(lines, list) and lines[-1] == "data: [DONE]"
    assert any(c["choices"] and c["choices"][0]["finish_reason"] == "length"
               for c in (json.loads(ln[6:]) for ln in lines if ln != "data: [DONE]"))
    ended = result["ended"]
    assert isinstance(ended, float) and ended > refused_at, "the stream ended before the shutdown: nothing drained"
    assert server.process.wait(timeout=30) == 0
    rows = query(server.db_path, "SELECT status, output_tokens FROM requests WHERE trace_id = ?",
                 [result["trace_id"]])
    assert rows == [("ok", 1000)]
    for refused in (shed, late):
        rows = query(server.db_path, "SELECT status FROM requests WHERE trace_id = ?",
                     [refused.headers["x-llmtrace-trace-id"]])
        assert rows == [("error",)]
