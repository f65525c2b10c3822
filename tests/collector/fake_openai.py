"""A minimal OpenAI-compatible chat endpoint on loopback, for foreign instrumentations wrapping the real SDK.

Every answer is cut at the length cap (``finish_reason: "length"``) with known usage, so a test can check
that model, tokens and the finish reason survive each instrumentation's attribute names.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "tiny-model-2025"
PROMPT_TOKENS, COMPLETION_TOKENS = 21, 8


def _completion(stream_chunk: bool, **extra: object) -> dict[str, object]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk" if stream_chunk else "chat.completion",
            "created": int(time.time()), "model": MODEL, **extra}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                 "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
        if not body.get("stream"):
            doc = _completion(False, choices=[{"index": 0, "finish_reason": "length", "message": {
                "role": "assistant", "content": "one two three four five six seven eight"}}], usage=usage)
            data = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        words = "one two three four five six seven eight".split()
        for i, w in enumerate(words):
            choice = {"index": 0, "delta": ({"role": "assistant"} if i == 0 else {}) | {"content": w + " "},
                      "finish_reason": "length" if i == len(words) - 1 else None}
            self.wfile.write(f"data: {json.dumps(_completion(True, choices=[choice]))}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.005)
        if (body.get("stream_options") or {}).get("include_usage"):
            self.wfile.write(f"data: {json.dumps(_completion(True, choices=[], usage=usage))}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def fake_openai() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a running fake; stopped on exit."""
    with serving(_Handler) as base_url:
        yield base_url


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields its ``/v1`` base URL, stopped on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
