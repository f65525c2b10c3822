"""What the stage writers read: ``instrument``'s options and one finished call, frozen.

``Call`` (call.py) gathers a call's state while the app reads the response; when the call ends it hands
the stage writers (client_stages.py, wire.py) a :class:`CallRecord` and they write spans from it alone, so
they never import the call back (the middleware's import graph has no circle).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtrace.tracer.registry import stage_ids as S

if TYPE_CHECKING:
    from llmtrace.adapters.middleware.observation import Observation
    from llmtrace.tracer.reading.sessions import View
    from llmtrace.tracer.record.recording import PassSpan

# Stages a hosted provider keeps to itself; marked unobserved on the client pass (the bundled server
# records them for real on its own pass span).
DEFAULT_HIDDEN_STAGES: tuple[str, ...] = (S.ARRIVAL_ADMISSION, S.FORWARD_PREFILL, S.FORWARD_DECODE)


@dataclass(frozen=True, slots=True)
class Options:
    """What ``instrument`` was asked for; shared by every call through one transport."""

    provider: str | None = None
    hidden_stages: tuple[str, ...] = DEFAULT_HIDDEN_STAGES
    inject_traceparent: bool = True
    # Ask OpenAI-style streams for usage (``stream_options.include_usage``) and hide the answer's extra
    # usage chunk from the app; False leaves the request as the app built it.
    request_usage: bool = True
    # Ask providers that support it for their own cache-miss diagnostics (see ``cache_diagnostics.py``).
    cache_diagnostics: bool = False
    # Counts tokens of a text when the provider reports no usage (None: about 4 characters a token).
    tokenizer: Callable[[str], int] | None = None


class Connection:
    """Collects httpcore ``trace`` extension events: was a new connection opened, and how long it took."""

    __slots__ = ("connect_start", "connect_end", "saw_http")

    def __init__(self) -> None:
        self.connect_start = 0
        self.connect_end = 0
        self.saw_http = False

    def event(self, name: str) -> None:
        if name.startswith("connection."):
            if name == "connection.connect_tcp.started" or name == "connection.connect_unix_socket.started":
                self.connect_start = time.perf_counter_ns()
            elif name.endswith(".complete") and self.connect_start:
                self.connect_end = time.perf_counter_ns()  # tcp, then tls: the last one wins
        elif not self.saw_http and (name.startswith("http11.") or name.startswith("http2.")):
            self.saw_http = True


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One finished call as the stage writers read it. Instants are ``perf_counter_ns``; ``wall`` maps one
    onto the wall clock the spans carry."""

    obs: Observation
    pass_span: PassSpan
    opts: Options
    provider: str  # the parser's: openai, anthropic, ...
    operation: str  # chat, text_completion, responses
    usage_style: str  # how the API reports usage (usage.py)
    host: str
    port: int
    retry: int  # the SDK's retry count (x-stainless-retry-count)
    t0_wall: int
    t0: int
    t_headers: int  # 0: no headers came
    end: int
    status_code: int
    streamed: bool  # the answer came as server-sent events
    stream_overflowed: bool  # the SSE parser stopped (an event past its size limit)
    usage_requested: bool  # the middleware added include_usage (and hid the usage chunk from the app)
    times: array[int]  # when each event the app saw arrived
    body_overflow: int  # bytes of a buffered answer too large to parse, else 0
    conn: Connection
    server_span: str | None  # the bundled backend's pass span id
    undecoded: str | None  # a content-encoding the middleware could not decode
    view: View | None  # the conversation this call belongs to
    ttft_wait: int | None = None  # ns the calling thread waited for a CPU before the first token (run_queue.py)

    def wall(self, perf_ns: int) -> int:
        return self.t0_wall + (perf_ns - self.t0)
