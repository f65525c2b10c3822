"""Hostile and faulty clients against the real ``llmtrace serve`` (issue 14): huge prompts, unvalidated
input, stalled connections, API keys, shutdown mid-stream and writes to ended spans."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from testkit import RunningServer, start_server, stop_server

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("hardening"))
    yield s
    stop_server(s)


def _p(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


# ───────────────────────────────────────────────────────────── item 2: huge prompts
def test_huge_prompts_do_not_stall_health_or_a_running_stream(server: RunningServer) -> None:
    """Four ~7 MB prompts (refused from their length alone) and two 600 KB ones (near the floor, so they
    go through intake on a worker thread) while a stream runs: /health p99 stays under 200 ms, the stream
    keeps sending, and each big request gets a clear context_length_exceeded 400."""
    huge = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hello world " * 600000}]})
    mid = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hello world " * 50000}]})
    results: list[tuple[int, dict, float]] = []

    def big(body: str) -> None:
        t0 = time.perf_counter()
        r = httpx.post(server.base_url + CHAT, content=body.encode(), timeout=120,
                       headers={"content-type": "application/json"})
        results.append((r.status_code, r.json(), time.perf_counter() - t0))

    chunk_times: list[float] = []
    done = threading.Event()

    def stream() -> None:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "max_tokens": 6000,
                "ignore_eos": True, "stream": True}
        with httpx.Client(timeout=60) as c, c.stream("POST", server.base_url + CHAT, json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    chunk_times.append(time.perf_counter())
                if done.is_set():
                    break

    streamer = threading.Thread(target=stream)
    streamer.start()
    while not chunk_times:
        time.sleep(0.01)
    senders = [threading.Thread(target=big, args=(b,)) for b in (huge, huge, mid, huge, mid, huge)]
    t_start = time.perf_counter()
    for t in senders:
        t.start()
    latencies: list[float] = []
    with httpx.Client(timeout=60) as c:
        while any(t.is_alive() for t in senders) or time.perf_counter() - t_start < 3.0:
            t0 = time.perf_counter()
            assert c.get(server.base_url + "/health").status_code == 200
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.005)
    t_end = time.perf_counter()
    done.set()
    streamer.join(timeout=60)
    latencies.sort()
    assert _p(latencies, 0.99) <= 0.2, f"/health p99 {_p(latencies, 0.99):.3f}s of {len(latencies)}: {latencies[-8:]}"
    assert len(results) == 6
    for status, body, _ in results:
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
    assert max(elapsed for _, _, elapsed in results) < 20
    # The stream kept going while the big requests were handled: no gap over 1 s inside that window.
    window = [t for t in chunk_times if t_start <= t <= t_end]
    gaps = [b - a for a, b in zip([t_start, *window], [*window, t_end], strict=True)]
    assert window and max(gaps) < 1.0, f"stream stalled for {max(gaps):.2f}s"
