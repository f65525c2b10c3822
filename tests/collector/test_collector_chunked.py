"""Chunked request bodies on a raw socket: malformed sizes are 400 at once, the body cap holds (413)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from collector_helpers import RunningCollector, start_collector
from test_collector_bad_input import _request


@pytest.fixture(scope="module")
def col(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCollector]:
    c = start_collector(tmp_path_factory.mktemp("chunked"), "--max-body", "1MB")
    try:
        yield c
    finally:
        assert c.stop() == 0


def _head(port: int, extra: str = "Transfer-Encoding: chunked\r\n") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n{extra}\r\n".encode())
    return s


def _status(s: socket.socket, timeout_s: float = 5.0) -> tuple[int, bytes]:
    s.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = s.recv(65536)
        if not piece:
            break
        data += piece
    assert data, "no response before the connection closed"
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(h.split(b":", 1)[1]) for h in head.split(b"\r\n")
                   if h.lower().startswith(b"content-length:")), 0)
    while len(rest) < length:
        piece = s.recv(65536)
        if not piece:
            break
        rest += piece
    return int(data.split(b" ", 2)[1]), head + b"\r\n\r\n" + rest


@pytest.mark.parametrize("size_line", [b"-1", b"-0", b"+10", b"0x10", b"1_0", b" ", b"zz", b"1" * 17,
                                       b"FFFFFFFFFFFFFFFF", b"10" + b" " * 2000])
def test_malformed_or_huge_chunk_sizes_are_refused_at_once(col: RunningCollector, size_line: bytes) -> None:
    s = _head(col.port)
    try:
        s.sendall(size_line + b"\r\n")
        t = time.monotonic()
        # keep pushing body bytes, as the attack does: the answer must come without reading them all
        s.settimeout(0.05)
        code = 0
        for _ in range(200):
            try:
                s.sendall(b"A" * 65536)
            except OSError:
                break
            try:
                if s.recv(1, socket.MSG_PEEK):
                    break
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                break
        code, head = _status(s)
        assert code in (400, 413), head
        assert time.monotonic() - t < 5
    finally:
        s.close()


def test_the_cap_holds_for_chunked_bodies(col: RunningCollector) -> None:
    s = _head(col.port)
    try:
        sent = 0
        code = 0
        s.settimeout(10)
        try:
            while sent < (64 << 20):  # 64 MB in well-formed 64 KB chunks, against a 1 MB cap
                s.sendall(b"10000\r\n" + b"B" * 0x10000 + b"\r\n")
                sent += 0x10000
        except OSError:
            pass  # the collector stopped reading and closed: fine, the answer is already waiting
        code, head = _status(s)
        assert code == 413 and b"limit" in head, head
        # cut off long before 64 MB (what is left is socket buffers and a short lingering drain)
        assert sent < (24 << 20), f"the collector read {sent} bytes past a 1 MB cap"
    finally:
        s.close()


def test_good_chunked_body_is_stored_and_a_truncated_one_is_400(col: RunningCollector) -> None:
    body = _request(7, seed=4242).SerializeToString()
    before = int(col.stats()["rows_written"])
    s = _head(col.port)
    try:
        half = len(body) // 2
        s.sendall(f"{half:x};ext=1\r\n".encode() + body[:half] + b"\r\n"
                  + f"{len(body) - half:X}\r\n".encode() + body[half:] + b"\r\n0\r\nX-Trailer: 1\r\n\r\n")
        code, head = _status(s)
        assert code == 200, head
    finally:
        s.close()
    col.wait_written(before + 7)
    s = _head(col.port)
    try:
        s.sendall(b"100\r\n" + b"x" * 10)
        s.shutdown(socket.SHUT_WR)
        code, head = _status(s)
        assert code == 400 and b"bad chunked body" in head, head
    finally:
        s.close()
    assert col.process.poll() is None
