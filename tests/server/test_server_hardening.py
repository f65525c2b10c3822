"""Hostile and faulty clients against the real ``llmtrace serve`` (issue 14): huge prompts, unvalidated
input, stalled connections, API keys, shutdown mid-stream and writes to ended spans."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from testkit import RunningServer, free_port, start_server, stop_server

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("hardening"), "--header-timeout-s", "2", "--body-timeout-s", "3")
    yield s
    stop_server(s)


def _p(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


# ───────────────────────────────────────────────────────────── item 2: huge prompts
@dataclass
class _HugeRound:
    latencies: list[float]  # /health while the big requests are handled, sorted
    baseline: list[float]  # /health with only the stream running, sorted
    gaps: list[float]  # between the stream's chunks inside that window

    def stalled(self) -> str | None:
        """Why this round shows a stall, or None. 200 ms on a quiet machine (before the fix: ~7 s per 7 MB
        prompt); on a shared, overloaded one the process gets a fraction of a core, so the bound grows with
        what /health gives there without them."""
        p99, base = _p(self.latencies, 0.99), _p(self.baseline, 0.99)
        if p99 > 0.2 + 2 * base:
            return f"/health p99 {p99:.3f}s (baseline {base:.3f}s): {self.latencies[-8:]}"
        if not self.gaps or max(self.gaps) >= 1.0:  # the stream kept going: no gap over 1 s in that window
            return f"stream stalled for {max(self.gaps, default=0):.2f}s"
        return None


def _huge_round(server: RunningServer) -> _HugeRound:
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

    def sample(c: httpx.Client, seconds: float, busy: list[threading.Thread]) -> list[float]:
        out: list[float] = []
        t_begin = time.perf_counter()
        while any(t.is_alive() for t in busy) or time.perf_counter() - t_begin < seconds:
            t0 = time.perf_counter()
            assert c.get(server.base_url + "/health").status_code == 200
            out.append(time.perf_counter() - t0)
            time.sleep(0.005)
        return sorted(out)

    with httpx.Client(timeout=60) as c:
        # The same sampling with only the stream running: what this (shared, maybe busy) machine gives anyway.
        baseline = sample(c, 1.5, [])
        t_start = time.perf_counter()
        for t in senders:
            t.start()
        latencies = sample(c, 3.0, senders)
    t_end = time.perf_counter()
    done.set()
    streamer.join(timeout=60)
    assert len(results) == 6
    for status, body, _ in results:
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
    assert max(elapsed for _, _, elapsed in results) < 20
    window = [t for t in chunk_times if t_start <= t <= t_end]
    gaps = [b - a for a, b in zip([t_start, *window], [*window, t_end], strict=True)] if window else []
    return _HugeRound(latencies, baseline, gaps)


def test_huge_prompts_do_not_stall_health_or_a_running_stream(tiny_server: RunningServer) -> None:
    """Four ~7 MB prompts (refused from their length alone) and two 600 KB ones (near the floor, so they
    go through intake on a worker thread) while a stream runs: /health p99 stays under 200 ms, the stream
    keeps sending, and each big request gets a clear context_length_exceeded 400. A stall the server causes
    comes back every round; one a neighbour's burst of load causes seldom does twice: a round that shows one
    is run again, and the test fails only when both do. On the default server, not this module's: at load
    ~20 a 7 MB body took longer than its 3 s body timeout to arrive (a 408, not the 400 asked about)."""
    first = _huge_round(tiny_server).stalled()
    if first is not None:
        again = _huge_round(tiny_server).stalled()
        assert again is None, f"{first}; run again: {again}"


# ───────────────────────────────────────────────────────────── item 8: unvalidated input is a 400
_M = [{"role": "user", "content": "hi"}]


def _j(obj: object) -> bytes:
    return json.dumps(obj).encode()


HOSTILE = [
    ("surrogate-model", CHAT, b'{"model": "tiny\\ud800", "messages": [{"role": "user", "content": "hi"}]}'),
    ("surrogate-text", CHAT, b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\udc00b"}]}'),
    ("surrogate-prompt", "/v1/completions", b'{"model": "tiny", "prompt": "a\\ud800", "max_tokens": 2}'),
    ("surrogate-anthropic", "/v1/messages",
     b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("tool-calls-str", CHAT, _j({"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "assistant", "content": "", "tool_calls": "abc"}, {"role": "user", "content": "x"}]})),
    ("tool-calls-items", CHAT, _j({"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "assistant", "content": "", "tool_calls": ["abc", 1]}, {"role": "user", "content": "x"}]})),
    ("tool-calls-function-str", CHAT, _j({"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "assistant", "content": "", "tool_calls": [{"function": "f"}]}, {"role": "user", "content": "x"}]})),
    ("tool-calls-deep-arguments", CHAT, _j({"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[" * 100000}}]},
        {"role": "user", "content": "x"}]})),
    ("deep-json", CHAT, b'{"model": "tiny", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
    ("deep-json-anthropic", "/v1/messages", b'{"model": "tiny", "max_tokens": 2, "messages": ' + b"[" * 100000 + b"}"),
    ("5000-digit-int", CHAT, b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": '
     + b"9" * 5000 + b"}"),
    ("5000-digit-int-anthropic", "/v1/messages", b'{"model": "tiny", "messages": [], "max_tokens": -'
     + b"9" * 5000 + b"}"),
    ("max-tokens-past-64-bits-negative", CHAT, b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], '
     b'"max_tokens": -18446744073709551617}'),
    ("schema-type-junk", CHAT, _j({"model": "tiny", "messages": _M, "max_tokens": 2, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense", "properties": 5}}}})),
    ("response-format-str", CHAT, _j({"model": "tiny", "messages": _M, "response_format": "json"})),
    ("tools-items-str", CHAT, _j({"model": "tiny", "messages": _M, "tools": ["x"]})),
    ("tools-function-str", CHAT, _j({"model": "tiny", "messages": _M, "tools": [{"type": "function", "function": "x"}]})),
    ("stream-options-str", CHAT, _j({"model": "tiny", "messages": _M, "stream": True, "stream_options": "x"})),
    ("stop-int", CHAT, _j({"model": "tiny", "messages": _M, "stop": 5})),
    ("temperature-str", CHAT, _j({"model": "tiny", "messages": _M, "temperature": "hot"})),
    ("nan", CHAT, b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}'),
    ("anthropic-system-int", "/v1/messages", _j({"model": "tiny", "max_tokens": 2, "system": [5], "messages": _M})),
    ("anthropic-tools-str", "/v1/messages", _j({"model": "tiny", "max_tokens": 2, "messages": _M, "tools": "x"})),
    ("anthropic-tool-result-int", "/v1/messages", _j({"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 5}]}]})),
    ("anthropic-stop-sequences-int", "/v1/messages", _j({"model": "tiny", "max_tokens": 2, "messages": _M,
                                                          "stop_sequences": 5})),
]


@pytest.mark.parametrize("name, path, content", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_unvalidated_input_is_a_400_in_the_protocols_shape(server: RunningServer, name: str, path: str,
                                                         content: bytes) -> None:
    r = httpx.post(server.base_url + path, content=content, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400, r.text
    body = r.json()
    if path == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    else:
        assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"], body
    assert "Traceback" not in r.text and "Error:" not in body["error"]["message"]


def test_schema_bounds_past_64_bits_are_served_not_500(server: RunningServer) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 10**30, "maximum": 10**31}},
              "required": ["a"]}
    r = httpx.post(server.base_url + CHAT, timeout=60, json={
        "model": "tiny", "messages": _M, "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code in (200, 400), r.text
    r = httpx.post(server.base_url + "/v1/messages", timeout=60, json={
        "model": "tiny", "messages": _M, "max_tokens": 4,
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "integer", "maximum": -10**40}}}})
    assert r.status_code in (200, 400), r.text


def test_sdks_get_bad_request_errors_for_hostile_input(server: RunningServer) -> None:
    import anthropic
    import openai

    # (The SDKs cannot send a lone surrogate: their JSON encoders refuse it, so that case is raw httpx above.)
    oai = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="tiny", messages=_M, max_tokens=2, extra_body={"top_k": "many"})
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model="tiny", max_tokens=2, messages=[  # type: ignore[list-item]
            {"role": "assistant", "content": "", "tool_calls": "abc"}, {"role": "user", "content": "x"}])
    assert "tool_calls" in str(exc.value)
    ant = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        ant.messages.create(model="tiny", max_tokens=2, messages=[  # type: ignore[list-item]
            {"role": "user", "content": [{"type": "text", "text": 5}]}])
    with pytest.raises(anthropic.BadRequestError):
        ant.messages.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "x"}],
                            extra_body={"temperature": [1]})


# ───────────────────────────────────────────────────────────── item 7: stalled connections
def _open_stalled(port: int, n: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if payload:
            s.sendall(payload)
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket, deadline: float) -> bool:
    """True once the server has closed ``s`` (a read gives EOF or a reset), waiting until ``deadline``."""
    while True:
        s.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
        try:
            data = s.recv(65536)
        except TimeoutError:
            if time.monotonic() >= deadline:
                return False
            continue
        except OSError:
            return True
        if not data:
            return True
        # A 408/400 answer first is fine; keep reading to the close.


def test_slowloris_connections_are_closed_in_bounded_time(server: RunningServer) -> None:
    """100 connections that sent partial headers, 20 that sent nothing and 20 that sent headers but trickle
    the body: all are closed by the server within a bound, and a good request still gets through meanwhile."""
    port = server.port
    partial = _open_stalled(port, 100, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    silent = _open_stalled(port, 20, b"")
    trickle = _open_stalled(port, 20, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                      b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    t0 = time.monotonic()
    try:
        r = httpx.post(server.base_url + CHAT, timeout=30, json={"model": "tiny", "messages": _M,
                                                                         "max_tokens": 2})
        assert r.status_code == 200
        deadline = t0 + 15
        still_open = [s for s in partial + silent + trickle if not _closed_by_server(s, deadline)]
        assert not still_open, f"{len(still_open)} stalled connections still open after {time.monotonic() - t0:.1f}s"
    finally:
        for s in partial + silent + trickle:
            s.close()
    assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200


def test_oversized_request_headers_are_refused(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
        assert _closed_by_server(s, time.monotonic() + 5)
    assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200


# ───────────────────────────────────────────────────────────── item 15: --api-key
KEY = "sk-test-7f3a91"


def _spawn(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path, int]:
    port = free_port()
    log = tmp / f"serve-{port}.log"
    cmd = [sys.executable, "-m", "llmtrace.cli", "serve", "--model", "tiny", "--port", str(port),
           "--db", str(tmp / f"serve-{port}.duckdb"), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "LLMTRACE_STRICT": "1", **(env or {})})
    return proc, log, port


def _wait_health(proc: subprocess.Popen[bytes], log: Path, base: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"server did not come up: {log.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose key comes from LLMTRACE_API_KEY (kept out of ``ps``); yields its base URL."""
    proc, log, port = _spawn(tmp_path_factory.mktemp("keyed"), "--host", "127.0.0.1", env={"LLMTRACE_API_KEY": KEY})
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_health(proc, log, base)
        yield base
    finally:
        _stop(proc)


def test_api_key_with_both_sdks(keyed: str) -> None:
    import anthropic
    import openai

    good = openai.OpenAI(base_url=f"{keyed}/v1", api_key=KEY, max_retries=0)
    assert good.chat.completions.create(model="tiny", messages=_M, max_tokens=2).choices  # type: ignore[arg-type]
    assert [m.id for m in good.models.list().data] == ["tiny"]
    with pytest.raises(openai.AuthenticationError) as exc:
        openai.OpenAI(base_url=f"{keyed}/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model="tiny", messages=_M, max_tokens=2)  # type: ignore[arg-type]
    assert exc.value.status_code == 401 and exc.value.body["code"] == "invalid_api_key"  # type: ignore[index]

    ant = anthropic.Anthropic(base_url=keyed, api_key=KEY, max_retries=0)  # sends x-api-key
    assert ant.messages.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}]).content
    bearer = anthropic.Anthropic(base_url=keyed, auth_token=KEY, max_retries=0)  # sends Authorization: Bearer
    assert bearer.messages.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}]).id
    with pytest.raises(anthropic.AuthenticationError) as aexc:
        anthropic.Anthropic(base_url=keyed, api_key="wrong", max_retries=0).messages.create(
            model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert aexc.value.body == {"type": "error", "error": {"type": "authentication_error",  # type: ignore[comparison-overlap]
                                                          "message": "invalid API key"}}


def test_api_key_raw_http(keyed: str) -> None:
    assert httpx.get(keyed + "/health").status_code == 200  # open: load balancers probe it
    for path in ("/stats", "/metrics", "/v1/models"):
        r = httpx.get(keyed + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", path
        assert "missing API key" in r.json()["error"]["message"]
    r = httpx.post(keyed + "/v1/messages", json={"model": "tiny", "max_tokens": 2, "messages": _M})
    assert r.status_code == 401 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(keyed + "/stats", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.get(keyed + "/stats", headers={"x-api-key": KEY}).status_code == 200
    assert httpx.get(keyed + "/stats", headers={"authorization": f"Basic {KEY}"}).status_code == 401


def test_warning_when_binding_off_loopback_without_a_key(tmp_path: Path, server: RunningServer) -> None:
    proc, log, _ = _spawn(tmp_path, "--host", "0.0.0.0")
    try:
        deadline = time.monotonic() + 60
        while "warning: listening on 0.0.0.0" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        assert "no API key" in log.read_text() and "LLMTRACE_API_KEY" in log.read_text()
    finally:
        _stop(proc)
    assert "warning: listening" not in server.log()  # loopback without a key: no warning


# ───────────────────────────────────────────────────────────── item 9: SIGTERM cuts streams properly
def test_sigterm_cuts_streams_after_the_drain_with_an_error_event(tmp_path: Path) -> None:
    proc, log, port = _spawn(tmp_path, "--host", "127.0.0.1", "--drain-s", "1")
    base = f"http://127.0.0.1:{port}"
    _wait_health(proc, log, base)
    forever = {"model": "tiny", "max_tokens": 8000, "ignore_eos": True, "stream": True}
    got: dict[str, list[str]] = {}
    traces: dict[str, str] = {}
    started = threading.Barrier(3)

    def read(name: str, path: str, body: dict) -> None:
        with httpx.Client(timeout=60) as c, c.stream("POST", base + path, json=body) as r:
            traces[name] = r.headers["x-llmtrace-trace-id"]
            lines: list[str] = []
            got[name] = lines
            it = r.iter_lines()
            lines.append(next(it))
            started.wait()
            lines.extend(it)

    readers = [threading.Thread(target=read, args=("openai", CHAT, {**forever, "messages": _M})),
               threading.Thread(target=read, args=("anthropic", "/v1/messages", {**forever, "messages": _M}))]
    for t in readers:
        t.start()
    try:
        started.wait(timeout=60)
        t0 = time.monotonic()
        proc.terminate()  # SIGTERM
        for t in readers:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in readers), "a stream was never ended"
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - t0 < 15
    finally:
        if proc.poll() is None:
            proc.kill()
    data = [ln for ln in got["openai"] if ln.startswith("data: ")]
    assert data[-1] == "data: [DONE]", data[-3:]
    err = json.loads(data[-2][6:])["error"]
    assert "server shutdown" in err["message"] and err["type"] == "server_error"
    events = [ln for ln in got["anthropic"] if ln.startswith("event: ")]
    assert events[-1] == "event: error", events[-3:]
    last = json.loads([ln for ln in got["anthropic"] if ln.startswith("data: ")][-1][6:])
    assert last["type"] == "error" and "server shutdown" in last["error"]["message"]
    # The store says server shutdown, not "client disconnected" (the process flushed it before exiting).
    from server_testkit import query

    for name, trace_id in traces.items():
        rows = query(tmp_path / f"serve-{port}.duckdb",
                     "SELECT status, status_message, attributes->>'error.type' FROM spans "
                     "WHERE trace_id = ? AND operation = 'chat'", [trace_id])
        assert rows == [("error", rows[0][1], "server_shutdown")], (name, rows)
        assert "server shutdown" in rows[0][1]


# ───────────────────────────────────────────────────────────── item 10: no writes to ended spans
def test_disconnected_streams_write_nothing_to_ended_spans(server: RunningServer) -> None:
    from server_testkit import wait_idle, wait_rows

    body = {"model": "tiny", "messages": _M, "max_tokens": 2000, "ignore_eos": True, "stream": True}
    traces = []

    def leave_early() -> None:
        with httpx.Client(timeout=60) as c, c.stream("POST", server.base_url + CHAT, json=body) as r:
            traces.append(r.headers["x-llmtrace-trace-id"])
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 3:
                    break

    threads = [threading.Thread(target=leave_early) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    wait_idle(server.base_url)
    rows = wait_rows(server.db_path, "SELECT status, attributes->>'llmtrace.engine.status' FROM spans "
                     f"WHERE operation = 'chat' AND trace_id IN ({', '.join('?' * len(traces))})", traces,
                     until=lambda rows: len(rows) == 20)
    assert all(status == "cancelled" for status, _ in rows), rows
    # The engine's summary of each aborted pass landed before the pass ended (not dropped, not warned about).
    assert sum(engine == "cancelled" for _, engine in rows) >= 10, rows
    assert "Setting attribute on ended span" not in server.log()


def test_bf16_matmuls_of_many_row_counts_do_not_grow_memory() -> None:
    """What grew serve's RSS (470 -> 880 MB over 5,000 requests): oneDNN keeps state for every distinct row
    count of a CPU bfloat16 GEMM, and engine steps batch 1..2048 tokens. The model's linear layers round row
    counts up to a few dozen buckets; 96 distinct counts must not cost more than their buckets do. Unbucketed
    (``F.linear`` on the same shapes) these 96 counts grew RSS by 63 MB, measured on an AVX2-only EPYC; the
    counts stay under 400 rows so the test takes seconds on a CPU that emulates bf16 (all 2,048 took 2-3 min).
    In a fresh process so the RSS measured is this code's alone."""
    code = """
import torch
from llmtrace.backend.model.linear import Linear, row_bucket
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) / 1024
lin = Linear(torch.randn(1536, 576, dtype=torch.bfloat16))
x = torch.randn(400, 576, dtype=torch.bfloat16)
counts = range(17, 400, 4)  # 96 distinct row counts
for n in sorted({row_bucket(n) for n in counts}):
    lin(x[:n])  # every bucket they fall in once: the state the buckets are allowed
before = rss()
for n in counts:
    y = lin(x[:n])
    assert y.shape == (n, 1536)
after = rss()
# padding rows changes nothing about the real ones (checked after measuring: F.linear unpadded is the leak)
ref = torch.nn.functional.linear(x[:100].float(), lin.weight.float())
assert torch.allclose(lin(x[:100]).float(), ref, rtol=0.05, atol=0.5)
rss_growth = after - before
print(round(rss_growth, 1), len({row_bucket(n) for n in range(1, 2049)}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    growth_mb, buckets = out.stdout.split()
    assert int(buckets) <= 48
    assert float(growth_mb) < 30, f"RSS grew {growth_mb} MB over 96 distinct row counts"
