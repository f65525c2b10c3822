"""Bounded load: 64 concurrent streaming clients against 2 replicas of the tiny model with small limits.
Every request either completes or is shed with 429; afterwards the pools are whole again; every request
left exactly one pass span, and every admitted one carries all its stages exactly once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from server_testkit import query, stats, wait_idle, wait_rows
from testkit import RunningServer, start_server, stop_server

CLIENTS = 64
SERVER_STAGES = {"arrival.connection", "arrival.admission", "arrival.model_routing", "arrival.replica_selection",
                 "arrival.stream_setup", "intake.normalization", "intake.chat_template", "intake.tokenization"}


@pytest.fixture(scope="module")
def load_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("load-server"), "--replicas", "2", "--max-running", "8",
                          "--max-queued", "8", "--max-num-seqs", "4")
    yield server
    stop_server(server)


async def _client(http: httpx.AsyncClient, i: int) -> tuple[int, str, str | None]:
    body = {"model": "tiny", "stream": True, "max_tokens": 24, "ignore_eos": True,
            "messages": [{"role": "system", "content": "Shared support-desk preamble. " * 4},
                         {"role": "user", "content": f"ticket {i}"}]}
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        trace_id = r.headers["x-llmtrace-trace-id"]
        if r.status_code != 200:
            await r.aread()
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.text
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
            return 429, trace_id, None
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    finishes = [json.loads(ln[6:])["choices"][0]["finish_reason"] for ln in lines[:-1]]
    return 200, trace_id, [f for f in finishes if f][0]


@pytest.mark.slow
def test_64_streaming_clients_complete_or_are_shed(load_server: RunningServer) -> None:
    async def run() -> list[tuple[int, str, str | None]]:
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=load_server.base_url, timeout=120, limits=limits) as http:
            return await asyncio.gather(*[_client(http, i) for i in range(CLIENTS)])

    results = asyncio.run(run())
    codes = Counter(code for code, _, _ in results)
    assert codes[200] + codes[429] == CLIENTS
    assert codes[200] >= 16 and codes[429] >= 1, codes  # 8 running + 8 queued at least; some shed
    assert all(reason == "length" for code, _, reason in results if code == 200)

    idle = wait_idle(load_server.base_url)
    for replica in idle["replicas"].values():
        assert replica["available_blocks"] == replica["num_blocks"] and replica["served"] > 0
    assert idle["admission"]["shed_total"] == codes[429]

    db = load_server.db_path
    ids = [t for _, t, _ in results]
    marks = ",".join("?" * len(ids))
    passes = wait_rows(db, f"SELECT trace_id, status FROM requests WHERE trace_id IN ({marks})", ids,
                       until=lambda rows: len(rows) >= CLIENTS)
    assert len(passes) == CLIENTS and len({t for t, _ in passes}) == CLIENTS  # exactly one pass per request
    status = dict(passes)
    stage_rows = query(db, f"SELECT trace_id, stage FROM stages WHERE trace_id IN ({marks})", ids)
    per_trace: dict[str, Counter[str]] = {}
    for trace_id, stage in stage_rows:
        per_trace.setdefault(trace_id, Counter())[stage] += 1
    catalog = {r[0] for r in query(db, "SELECT stage FROM stage_catalog WHERE stage_number BETWEEN 12 AND 34")}
    for code, trace_id, _ in results:
        seen = per_trace[trace_id]
        assert all(n == 1 for n in seen.values()), (trace_id, seen)
        if code == 200:
            assert status[trace_id] == "ok"
            missing = (SERVER_STAGES | catalog) - set(seen)
            assert not missing, f"{trace_id} lacks {sorted(missing)}"
        else:
            assert status[trace_id] == "error"
            admission = query(db, "SELECT attributes FROM stages WHERE trace_id = ? AND stage = 'arrival.admission'",
                              [trace_id])
            assert json.loads(admission[0][0])["llmtrace.admission.decision"] == "shed"


@pytest.mark.slow
def test_prefix_aware_selection_follows_the_cached_prefix(load_server: RunningServer) -> None:
    preamble = "A long preamble that only this test sends, so one replica holds its blocks. " * 5
    body = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "system", "content": preamble},
                                                          {"role": "user", "content": "q"}]}
    with httpx.Client(base_url=load_server.base_url, timeout=30) as http:
        first = http.post("/v1/chat/completions", json=body)
        wait_idle(load_server.base_url)
        second = http.post("/v1/chat/completions", json=body)
    t1, t2 = first.headers["x-llmtrace-trace-id"], second.headers["x-llmtrace-trace-id"]
    rows = wait_rows(load_server.db_path, "SELECT trace_id, attributes FROM stages WHERE stage = "
                     "'arrival.replica_selection' AND trace_id IN (?, ?)", [t1, t2], until=lambda r: len(r) == 2)
    sel = {t: json.loads(a) for t, a in rows}
    assert sel[t2]["llmtrace.replica.policy"] == "prefix_aware"
    assert sel[t2]["llmtrace.replica.id"] == sel[t1]["llmtrace.replica.id"]
    assert sel[t2]["llmtrace.replica.expected_hit_tokens"] >= 64
    assert stats(load_server.base_url)["in_flight"] == 0
