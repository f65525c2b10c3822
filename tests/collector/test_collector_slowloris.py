"""Stalled connections (slowloris) cannot lock legitimate exporters out; the stalled ones are closed."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest
from collector_helpers import otlp_provider, query, start_collector
from test_collector_bad_input import _request

STALLS = 128


def _stall(port: int, kind: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "body":  # headers sent, the body trickled
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                  b"Content-Length: 100000\r\n\r\n\x0a")
    elif kind == "headers":  # headers trickled
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
    return s  # "silent": connected, nothing sent


def _closed_by_server(s: socket.socket, wait_s: float) -> bytes | None:
    """What the server sent before closing, or None if it is still open after ``wait_s``."""
    s.settimeout(wait_s)
    data = b""
    try:
        while True:
            piece = s.recv(4096)
            if not piece:
                return data
            data += piece
    except TimeoutError:
        return None
    except OSError:
        return data


@pytest.mark.parametrize("per_client", ["64", "128"])  # the default, and one address allowed every slot
def test_128_stalled_connections_do_not_503_a_real_exporter_and_are_closed(tmp_path: Path, per_client: str) -> None:
    col = start_collector(tmp_path, "--header-timeout", "2", "--body-timeout", "3", "--idle-timeout", "3",
                          "--max-connections-per-client", per_client)
    stalls = [_stall(col.port, ("body", "headers", "silent")[i % 3]) for i in range(STALLS)]
    try:
        time.sleep(0.8)  # they are stalled, not merely new
        for s in stalls[::3]:
            try:
                s.sendall(b"\x00")  # a byte now and then, as slowloris does
            except OSError:
                pass  # already closed to make room (one address may hold 64)
        t0 = time.monotonic()
        # a plain export first: answered 200 at once, not 503
        r = httpx.post(col.endpoint, content=_request(5, seed=77).SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf"}, timeout=5)
        assert r.status_code == 200, r.status_code
        tp = otlp_provider(col.endpoint, "legit")
        tr = tp.get_tracer("t")
        for i in range(20):
            tr.start_span(f"op{i}").end()
        assert tp.force_flush(10_000)
        tp.shutdown()
        col.wait_written(25, timeout_s=10)
        assert time.monotonic() - t0 < 5
        stats = col.stats()
        assert stats.get("http_503", 0) == 0, stats
        assert stats["connections_evicted"] >= 1, stats  # room was made by closing stalled ones
        if per_client == "128":
            assert stats["connections_refused"] == 0, stats
        # every stalled connection is closed by the server within its deadline (plus margin)
        deadline = time.monotonic() + 8
        still_open = 0
        answers = []
        for s in stalls:
            got = _closed_by_server(s, max(0.05, deadline - time.monotonic()))
            if got is None:
                still_open += 1
            else:
                answers.append(got)
        assert still_open == 0
        assert any(a.startswith(b"HTTP/1.1 408") for a in answers)  # trickled bodies are told why
        stats = col.stats()
        assert stats["connections_open"] <= 2, stats
        closed = stats["connections_timed_out"] + stats["connections_evicted"] + stats["connections_refused"]
        assert closed >= STALLS, stats
    finally:
        for s in stalls:
            s.close()
        assert col.stop() == 0
    assert query(col.db, "SELECT count(*) FROM spans WHERE service = 'legit'") == [(20,)]
    assert query(col.db, "SELECT count(*) FROM spans WHERE service = 'raw'") == [(5,)]


def test_one_client_cannot_take_every_slot(tmp_path: Path) -> None:
    col = start_collector(tmp_path, "--max-connections", "8", "--max-connections-per-client", "4",
                          "--header-timeout", "30")
    busy = [_stall(col.port, "headers") for _ in range(4)]
    try:
        time.sleep(0.7)
        extra = _stall(col.port, "headers")  # a fifth from the same address: its stalest one is closed
        time.sleep(0.5)
        closed = [s for s in busy if _closed_by_server(s, 0.3) is not None]
        assert len(closed) == 1
        # the /stats call is a fifth connection from the same address too: one more stall makes room for it
        stats = col.stats()
        assert stats["connections_open"] == 4 and stats["connections_evicted"] == 2, stats
        extra.close()
    finally:
        for s in busy:
            s.close()
        assert col.stop() == 0
