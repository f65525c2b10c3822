"""One client call as the middleware sees it: opened with the request, fed the response bytes as the app
reads them, finished once (end of stream, close, or error).

Everything here runs inside the app's own request path, so each entry point is guarded: a failure in
recording is counted in ``llmtrace.tracer.record.health`` and the app's call goes on untouched.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from array import array
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from orjson import loads

from llmtrace.adapters.middleware import cache_diagnostics
from llmtrace.adapters.middleware.call_record import CallRecord, Connection, Options
from llmtrace.adapters.middleware.client_stages import emit_stages
from llmtrace.adapters.middleware.encoding import decoder_for
from llmtrace.adapters.middleware.protocol import ProtocolParser
from llmtrace.adapters.middleware.request_usage import (
    UsageStripper,
    replace_body,
    wants_injection,
    with_usage,
)
from llmtrace.adapters.middleware.sse import SSEParser
from llmtrace.tracer import capture, health
from llmtrace.tracer import recording as rec
from llmtrace.tracer import semconv as sc
from llmtrace.tracer.reading import sessions
from llmtrace.tracer.reading.memory import memory
from llmtrace.tracer.record import run_queue
from llmtrace.tracer.registry import names as N

_MAX_BODY_BYTES = 16 * 1024 * 1024  # a buffered JSON answer larger than this is passed through unparsed
_MAX_MESSAGE_CHARS = 1000  # a failed call's status message is kept up to this long

def _ignore(chunk: bytes) -> None:
    return None


def _session_view(body: dict[str, object], segments: list[tuple[str, str]]) -> sessions.View | None:
    try:
        return memory.conversations.begin(body, segments)
    except Exception as exc:  # the conversation is a nicety; the call is not
        health.count("adapter_error", message=f"adapter could not read the conversation: {type(exc).__name__}: {exc}")
        return None


class Call:
    """State of one instrumented call. Created by the transport; never raises out of its methods."""

    __slots__ = (
        "parser",
        "obs",
        "pass_span",
        "opts",
        "host",
        "port",
        "t0_wall",
        "t0",
        "t_headers",
        "status_code",
        "sse",
        "body",
        "body_bytes",
        "body_overflow",
        "conn",
        "finished",
        "times",
        "retry",
        "server_span",
        "undecoded",
        "strip",
        "view",
        "wait0",
        "ttft_wait",
        "_feed",
    )

    def __init__(self, parser: ProtocolParser, request: Any, opts: Options) -> None:
        self.parser = parser
        self.obs = parser.obs
        self.opts = opts
        self.t0_wall = rec.now_ns()
        self.t0 = time.perf_counter_ns()
        # the calling thread's wait for a CPU so far; read again at the first token (run_queue.py)
        self.wait0 = run_queue.thread_wait()
        self.ttft_wait: int | None = None
        self.t_headers = 0
        self.status_code = 0
        self.server_span: str | None = None
        self.undecoded: str | None = None
        self.strip: UsageStripper | None = None
        self.view: sessions.View | None = None
        self.sse: SSEParser | None = None
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.body_overflow = 0
        self.conn = Connection()
        self.finished = False
        self.times = array("q")
        self._feed: Callable[[bytes], None] = self._feed_body
        url = request.url
        self.host = str(url.host)
        self.port = url.port or (443 if url.scheme == "https" else 80)
        retry = request.headers.get("x-stainless-retry-count")
        self.retry = int(retry) if retry and retry.isdigit() else 0
        try:
            body = loads(request.content) if request.content else {}
        except Exception:  # a streamed or non-JSON request body: nothing to read, still traced
            body = {}
        if isinstance(body, dict):
            parser.on_request(body)
            self.view = _session_view(body, self.obs.segments)
            self._rewrite(request, body)
        incoming = request.headers.get("traceparent")
        view = self.view
        # A tool round trip joins the trace of the call whose tool calls it answers, unless the app
        # already put the call somewhere (its own span, or a traceparent of its own).
        join = (
            view.parent
            if view is not None and incoming is None and not trace.get_current_span().get_span_context().is_valid
            else None
        )
        self.pass_span = rec.start_pass(
            self.obs.model,
            operation=parser.operation,
            side="client",
            provider=opts.provider or parser.provider,
            traceparent=incoming,
            parent=join,
            start_ns=self.t0_wall,
            attributes=view.attributes() if view is not None else None,
        )
        if view is not None and join is None:
            view.parent = None  # not joined: this call begins a turn of its own
        if opts.inject_traceparent:
            request.headers["traceparent"] = self.pass_span.traceparent()

    def _rewrite(self, request: Any, body: dict[str, object]) -> None:
        """Ask for what the app did not: usage on a stream, the provider's cache diagnostics."""
        opts, style = self.opts, self.parser.usage_style
        new_body: dict[str, object] | None = None
        usage = opts.request_usage and style == "openai" and wants_injection(body)
        if usage:
            new_body = with_usage(body)
        if opts.cache_diagnostics:
            conv = self.view.conversation if self.view is not None else None
            asked = cache_diagnostics.with_request(style, new_body or body, conv.last_response_id if conv else None)
            new_body = asked or new_body
        if new_body is not None and replace_body(request, new_body) and usage:
            self.strip = UsageStripper()

    def wall(self, perf_ns: int) -> int:
        return self.t0_wall + (perf_ns - self.t0)

    # ── response ────────────────────────────────────────────────────────────────────────────
    def on_headers(self, response: Any) -> None:
        try:
            self.t_headers = time.perf_counter_ns()
            self.status_code = int(response.status_code)
            headers = response.headers
            # The bundled backend names its own pass span: it records the engine stages itself.
            self.server_span = headers.get("x-llmtrace-span-id")
            ctype = headers.get("content-type", "")
            if self.status_code < 400 and ctype.startswith("text/event-stream"):
                self.sse = SSEParser()
                self._feed = self._feed_sse
            enc = headers.get("content-encoding")
            if self.strip is not None and (self.sse is None or (enc and enc.strip().lower() != "identity")):
                self.strip = None  # no SSE to re-frame (an error body), or compressed bytes: leave them be
            if enc and enc.strip().lower() != "identity":
                decode = decoder_for(enc)
                if decode is None:  # e.g. brotli without its module: pass through, say why nothing was parsed
                    self.undecoded = enc
                    self._feed = _ignore
                else:
                    parse = self._feed
                    self._feed = lambda chunk: parse(decode(chunk))
        except Exception as exc:
            self._fault(exc)

    def feed(self, chunk: bytes) -> None:
        try:
            self._feed(chunk)
        except Exception as exc:
            self._fault(exc)

    def _feed_sse(self, chunk: bytes) -> None:
        sse = self.sse
        assert sse is not None  # _feed is this method only once the SSE parser is made
        events = sse.feed(chunk)
        if events:
            t = time.perf_counter_ns()
            # read only until the first token (a stream read on another thread than the one that sent it has no
            # reading to subtract, and must not read on every chunk after it)
            waited = None if self._first_token_seen() else run_queue.thread_wait_since(self.wait0)
            on_chunk = self.parser.on_chunk
            times = self.times
            for name, data in events:
                if data:
                    if data != b"[DONE]":
                        times.append(t)
                    on_chunk(name, data, t)
            if waited is not None and self._first_token_seen():
                self.ttft_wait = waited

    def _first_token_seen(self) -> bool:
        return bool(self.obs.first_content_ns or self.obs.first_tool_ns)

    def _feed_body(self, chunk: bytes) -> None:
        self.body_bytes += len(chunk)
        if self.body_bytes > _MAX_BODY_BYTES:
            self.body_overflow = self.body_bytes
            self.body.clear()
        else:
            self.body.append(chunk)

    # ── the end ─────────────────────────────────────────────────────────────────────────────
    def finish_eof(self) -> None:
        """The app read the whole response."""
        if self.finished:
            return
        try:
            if self.sse is not None:
                t = time.perf_counter_ns()
                for name, data in self.sse.flush():
                    self.times.append(t)
                    self.parser.on_chunk(name, data, t)
            elif self.body and not self.body_overflow:
                waited = run_queue.thread_wait_since(self.wait0)
                self.parser.on_response(b"".join(self.body))
                if self.ttft_wait is None and self._first_token_seen():
                    self.ttft_wait = waited
            obs = self.obs
            if self.status_code >= 400:
                msg = f"HTTP {self.status_code}" + (f": {obs.error_message}" if obs.error_message else "")
                self._end("error", msg, error_type=str(self.status_code))
            elif obs.provider_failed:
                self._end("error", f"{obs.error_type}: {obs.error_message or ''}", error_type=obs.error_type)
            elif self.sse is not None and not obs.done and not obs.finish_reasons and not self.undecoded:
                self._end(
                    "error", "stream ended before the provider's end marker", error_type="incomplete_stream"
                )
            else:
                self._end("ok", None)
        except Exception as exc:
            self._fault(exc)

    def finish_closed(self) -> None:
        """The app closed the response before reading it all (e.g. broke out of a stream)."""
        if self.finished:
            return
        obs = self.obs
        # SDKs stop reading at the end marker ([DONE]) or at a provider error event, then close: the
        # call ended as the provider said, not because the app gave up.
        if obs.done or obs.provider_failed:
            self.finish_eof()
            return
        try:
            self._end("cancelled", f"closed by the app after {len(self.times)} events")
        except Exception as exc:
            self._fault(exc)

    def finish_error(self, exc: BaseException) -> None:
        """The transport raised (connect error, timeout, reset mid-stream); the caller re-raises it."""
        if self.finished:
            return
        try:
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
                self._end("cancelled", f"{type(exc).__name__} while the response was read")
                return
            # the exception's text may quote a key or a token (a URL with credentials, a header): scrubbed as
            # every stored text is
            trace_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.pass_span.otel_span.record_exception(exc, attributes={
                "exception.message": capture.scrub(str(exc)), "exception.stacktrace": capture.scrub(trace_text)})
            self._end("error", f"{type(exc).__name__}: {exc}", error_type=type(exc).__qualname__)
        except Exception as inner:
            self._fault(inner)

    def _end(self, status: rec.SpanStatus, message: str | None, error_type: str | None = None) -> None:
        self.finished = True
        end = time.perf_counter_ns()
        span = self.pass_span
        if error_type:
            span.set(sc.ERROR_TYPE, error_type)
        if message is not None:
            # a provider's error body or an exception may quote a key ("Incorrect API key provided: sk-..."):
            # the status message is stored like any text, scrubbed, and short
            message = capture.scrub(message)[:_MAX_MESSAGE_CHARS]
        try:
            emit_stages(self.record(end))
        finally:
            span.end(status, message, end_ns=self.wall(end))

    def record(self, end: int) -> CallRecord:
        """The finished call, frozen, as the stage writers read it."""
        obs, parser, times = self.obs, self.parser, self.times
        if self.strip is not None and 0 <= obs.usage_only_at < len(times):
            del times[obs.usage_only_at]  # the usage chunk the middleware asked for: the app never saw it
        return CallRecord(
            obs=obs, pass_span=self.pass_span, opts=self.opts, provider=parser.provider,
            operation=parser.operation, usage_style=parser.usage_style, host=self.host, port=self.port,
            retry=self.retry, t0_wall=self.t0_wall, t0=self.t0, t_headers=self.t_headers, end=end,
            status_code=self.status_code, streamed=self.sse is not None,
            stream_overflowed=self.sse is not None and self.sse.overflowed, usage_requested=self.strip is not None,
            times=times, body_overflow=self.body_overflow, conn=self.conn, server_span=self.server_span,
            undecoded=self.undecoded, view=self.view, ttft_wait=self.ttft_wait,
        )

    def _fault(self, exc: Exception) -> None:
        health.count("adapter_error", message=f"adapter recording failed: {type(exc).__name__}: {exc}")
        self._feed = _ignore
        if not self.finished:
            self.finished = True
            try:
                self.pass_span.set(N.ADAPTER_FAULT, f"{type(exc).__name__}: {exc}")
                self.pass_span.end("ok")
            except Exception:
                pass
