"""The pass span as the engine sees it, so nothing writes to it after it ended.

The engine writes a pass's summary (``stage_emitter.emit``: stage spans under it, then one ``set_many``) on
its own thread when the sequence finishes; for a sequence the server aborts (the client left, shutdown)
that is at the engine's next step, after the server has already decided the pass is over. Ending the span
at once then made every such summary a burst of "Setting attribute on ended span" warnings, and lost it.

So the server ends an aborted pass through ``end_after_engine``: at once when the engine never got the
request or has already written its summary, else right after that write lands (at most ``wait_s`` later:
an engine that never writes again does not keep the span open). The end time is the moment the server
decided, whenever the end is carried out; writes that come later still are dropped, not warned about.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N

# One writer per value of a served pass span. The server owns what the request asked for (it parsed it and
# fitted max_tokens to the context), the model it routed to, and the times the client saw (TTFT and TPOT from
# when tokens left the HTTP side); the engine owns what only it computed (tokens, cached tokens, finish
# reason, batch composition, its own llmtrace.engine.* times). An engine run alone (no server) writes all of
# its summary; under the server its copies of the server's values are dropped here, not overwritten later.
SERVER_OWNED = frozenset({
    N.GEN_AI_RESPONSE_MODEL, N.GEN_AI_REQUEST_TEMPERATURE, N.GEN_AI_REQUEST_TOP_P, N.GEN_AI_REQUEST_SEED,
    N.GEN_AI_REQUEST_MAX_TOKENS, N.TTFT_MS, N.TPOT_MS,
})


class EngineSpanView:
    __slots__ = ("_ps", "_lock", "submitted", "released", "_pending", "_ended")
    # Ends still waiting for their engine (strong references: a pass nobody ends is never exported).
    _waiting: set[EngineSpanView] = set()
    _waiting_lock = threading.Lock()

    def __init__(self, pass_span: rec.PassSpan) -> None:
        self._ps = pass_span
        self._lock = threading.Lock()
        self.submitted = False  # handed to the engine (it may write to the span from now on)
        self.released = False  # the engine wrote its summary: it will not touch the span again
        self._pending: tuple[rec.SpanStatus, str | None, int, Mapping[str, object]] | None = None
        self._ended = False

    # What the engine uses: the context its stage spans hang under, and its summary values.
    @property
    def context(self) -> Any:
        return self._ps.context

    def set(self, key: str, value: object) -> None:
        self.set_many({key: value})

    def set_many(self, values: Mapping[str, object]) -> None:
        with self._lock:
            if self._ended:
                return  # too late (the wait ran out): dropped rather than written to an ended span
            self._ps.set_many({k: v for k, v in values.items() if k not in SERVER_OWNED})
            self.released = True
            pending, self._pending = self._pending, None
            if pending is not None:
                self._end(*pending)

    # What the server uses.
    def end_after_engine(self, status: rec.SpanStatus, message: str | None,
                         values: Mapping[str, object] | None = None, *, wait_s: float = 10.0) -> None:
        """End the pass with ``status``; ``values`` are the server's last word, set after the engine's."""
        end_ns = rec.now_ns()
        with self._lock:
            if self._ended:
                return
            if not self.submitted or self.released:
                self._end(status, message, end_ns, values or {})
                return
            self._pending = (status, message, end_ns, values or {})
            with EngineSpanView._waiting_lock:
                EngineSpanView._waiting.add(self)
        asyncio.get_running_loop().call_later(wait_s, self._give_up)

    @classmethod
    def end_all_waiting(cls) -> int:
        """At exit (the loop and the engines are stopped, so no timer fires and no summary comes): end every
        pass still waiting, so it is exported. Returns how many there were."""
        with cls._waiting_lock:
            views = list(cls._waiting)
        for view in views:
            view._give_up()
        return len(views)

    def _give_up(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                self._end(*pending)

    def _end(self, status: rec.SpanStatus, message: str | None, end_ns: int, values: Mapping[str, object]) -> None:
        self._ended = True
        with EngineSpanView._waiting_lock:
            EngineSpanView._waiting.discard(self)
        self._ps.set_many(values)
        self._ps.end(status, message, end_ns=end_ns)
