"""An OpenAI-compatible endpoint on loopback that answers in the shapes real apps meet, for foreign
instrumentations wrapping the real SDK: cached prompt tokens in ``prompt_tokens_details`` (and the
Responses API's ``input_tokens_details``; Anthropic's ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` at ``/v1/messages``), tool calls (buffered and streamed as argument deltas), ``n`` choices,
streams whose opening chunk comes with the first token, ``FIRST_CHUNK_S`` after the headers (so a
recorded TTFT can be checked against it), and refusals: model
``err400`` answers 400, ``err429`` answers 429, each with an OpenAI error body."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from fake_openai import serving

MODEL = "shapes-model-1"
PROMPT, OUTPUT, CACHED, CACHE_WRITE = 40, 8, 32, 4
FIRST_CHUNK_S = 0.15
WORDS = "one two three four five six seven eight".split()
ERRORS = {"err400": (400, "invalid_request_error"), "err429": (429, "rate_limit_error")}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, code: int, doc: object) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, dict[str, object]]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.flush()
        time.sleep(FIRST_CHUNK_S)  # "prefill": the headers at once, the opening event with the first token
        for name, doc in events:
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {json.dumps(doc)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.005)
        if events and events[0][0] is None:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        if body.get("model") in ERRORS:
            code, kind = ERRORS[body["model"]]
            return self._json(code, {"error": {"message": f"refused ({kind})", "type": kind, "code": kind}})
        if self.path.endswith("/responses"):
            return self._responses(body)
        if self.path.endswith("/messages"):  # Anthropic's Messages API: a cache read and a cache write
            return self._json(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
                                    "content": [{"type": "text", "text": " ".join(WORDS)}],
                                    "stop_reason": "max_tokens", "stop_sequence": None,
                                    "usage": {"input_tokens": PROMPT - CACHED - CACHE_WRITE,
                                              "cache_read_input_tokens": CACHED,
                                              "cache_creation_input_tokens": CACHE_WRITE, "output_tokens": OUTPUT}})
        usage = {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT, "total_tokens": PROMPT + OUTPUT,
                 "prompt_tokens_details": {"cached_tokens": CACHED}}
        n, tools = int(body.get("n") or 1), bool(body.get("tools"))
        reason = "tool_calls" if tools else "length"
        if not body.get("stream"):
            choices = []
            for i in range(n):
                msg: dict[str, object] = {"role": "assistant", "content": None if tools else " ".join(WORDS)}
                if tools:
                    msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                          "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]
                choices.append({"index": i, "finish_reason": reason, "message": msg})
            return self._json(200, {"id": "c1", "object": "chat.completion", "created": int(time.time()),
                                    "model": MODEL, "choices": choices, "usage": usage})
        # the opening chunk carries only the role, sent with the first token (as OpenAI, vLLM and llmtrace serve do)
        chunks: list[tuple[str | None, dict[str, object]]] = [(None, self._chunk(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None} for i in range(n)]))]
        for k, word in enumerate(WORDS):
            deltas = []
            for i in range(n):
                if tools:
                    call: dict[str, object] = {"index": 0, "function": {"arguments": '{"q":1}' if k == 1 else ""}}
                    if k == 0:
                        call = {"index": 0, "id": f"call_{i}", "type": "function",
                                "function": {"name": "lookup", "arguments": ""}}
                    delta: dict[str, object] = {"tool_calls": [call]}
                else:
                    delta = {"content": word + " "}
                deltas.append({"index": i, "delta": delta, "finish_reason": reason if k == len(WORDS) - 1 else None})
            chunks.append((None, self._chunk(deltas)))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append((None, self._chunk([], usage=usage)))
        self._sse(chunks)

    @staticmethod
    def _chunk(choices: list[dict[str, object]], **extra: object) -> dict[str, object]:
        return {"id": "c1", "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL,
                "choices": choices, **extra}

    def _responses(self, body: dict[str, object]) -> None:
        doc = {"id": "resp_1", "object": "response", "created_at": int(time.time()), "model": MODEL,
               "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
               "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "incomplete",
                           "content": [{"type": "output_text", "text": "one two", "annotations": []}]}],
               "usage": {"input_tokens": PROMPT, "output_tokens": OUTPUT, "total_tokens": PROMPT + OUTPUT,
                         "input_tokens_details": {"cached_tokens": CACHED},
                         "output_tokens_details": {"reasoning_tokens": 0}},
               "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
        if not body.get("stream"):
            return self._json(200, doc)
        start = dict(doc, status="in_progress", output=[], usage=None, incomplete_details=None)
        self._sse([("response.created", {"type": "response.created", "sequence_number": 0, "response": start}),
                   ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1",
                                                   "output_index": 0, "content_index": 0, "delta": "one",
                                                   "sequence_number": 1, "logprobs": []}),
                   ("response.incomplete", {"type": "response.incomplete", "sequence_number": 2, "response": doc})])


@contextmanager
def fake_openai_shapes() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a running endpoint; stopped on exit."""
    with serving(_Handler) as base_url:
        yield base_url
