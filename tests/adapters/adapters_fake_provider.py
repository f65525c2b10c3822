"""A scripted HTTP endpoint on loopback for tests that need exact bytes or a broken connection.

It plays back byte strings we write by hand (OpenAI- and Anthropic-shaped), so the parsers and the
transport can be checked against streams the real server would never produce: impossible usage totals,
CRLF line endings, a connection cut mid-stream. Everything else runs against ``llmtrace serve``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A minimal OpenAI chat completion ("ok", 50 prompt tokens): the body tests script when only the request matters
CHAT_OK = json.dumps({"id": "c1", "model": "gpt-4o-mini", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51}}).encode()


@dataclass
class Script:
    status: int = 200
    content_type: str = "application/json"
    chunks: list[bytes] = field(default_factory=list)
    delay_s: float = 0.0
    cut_after: int | None = None  # close the socket after this many chunks, mid-body
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeProvider:
    base_url: str
    scripts: dict[str, Script]
    requests: list[tuple[str, dict[str, str], bytes]]


def sse(*events: object, anthropic: bool = False, done: bool = True, crlf: bool = False) -> list[bytes]:
    nl = "\r\n" if crlf else "\n"
    out: list[bytes] = []
    for ev in events:
        if anthropic:
            assert isinstance(ev, dict)
            out.append(f"event: {ev['type']}{nl}data: {json.dumps(ev)}{nl}{nl}".encode())
        else:
            out.append(f"data: {json.dumps(ev)}{nl}{nl}".encode())
    if done and not anthropic:
        out.append(f"data: [DONE]{nl}{nl}".encode())
    return out


@contextmanager
def fake_provider() -> Iterator[FakeProvider]:
    scripts: dict[str, Script] = {}
    seen: list[tuple[str, dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            n = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(n)
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            script = scripts.get(self.path) or Script(404, chunks=[b'{"error": {"message": "no script"}}'])
            self.send_response(script.status)
            self.send_header("content-type", script.content_type)
            for k, v in script.headers.items():
                self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for i, chunk in enumerate(script.chunks):
                if script.cut_after is not None and i == script.cut_after:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                if script.delay_s:
                    time.sleep(script.delay_s)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    class QuietServer(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # clients that time out or cut the connection are what some tests are about

    server = QuietServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeProvider(f"http://127.0.0.1:{server.server_address[1]}", scripts, seen)
    finally:
        server.shutdown()
        server.server_close()
