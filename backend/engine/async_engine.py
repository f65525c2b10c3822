"""``AsyncEngine``: the engine's ``step()`` on a background thread, results delivered to asyncio consumers.

``async for out in async_engine.generate(request)`` yields the request's ``RequestOutput``s; cancelling the
consumer (or breaking out of the loop) aborts the request so its blocks return to the pool.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

from llmtrace.backend.engine.engine import Engine
from llmtrace.backend.engine.request import EngineRequest, RequestOutput

log = logging.getLogger("llmtrace.engine")


class AsyncEngine:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[RequestOutput | BaseException]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="llmtrace-engine", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop:
            if not self.engine.has_unfinished():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                outputs = self.engine.step()
            except BaseException as exc:  # a broken step fails every waiting consumer instead of hanging them
                log.exception("engine step failed")
                self._fail_all(exc)
                continue
            for out in outputs:
                with self._lock:
                    target = self._queues.get(out.request_id)
                    if out.finished:
                        self._queues.pop(out.request_id, None)
                if target is not None:
                    loop, queue = target
                    loop.call_soon_threadsafe(queue.put_nowait, out)

    def _fail_all(self, exc: BaseException) -> None:
        with self._lock:
            targets = list(self._queues.items())
            self._queues.clear()
        for request_id, (loop, queue) in targets:
            self.engine.abort(request_id)
            error = exc if isinstance(exc, RuntimeError) and "shut down" in str(exc) else RuntimeError(
                f"engine step failed: {exc}")
            try:
                loop.call_soon_threadsafe(queue.put_nowait, error)
            except RuntimeError:  # the consumer's event loop is already closed
                pass

    async def generate(self, request: EngineRequest) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as the engine produces them; raises InvalidRequestError up front."""
        if self._stop:
            raise RuntimeError("the engine has been shut down")
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        with self._lock:
            self._queues[request.request_id] = (asyncio.get_running_loop(), queue)
        try:
            self.engine.add_request(request)
        except BaseException:
            with self._lock:
                self._queues.pop(request.request_id, None)
            raise
        self._wake.set()
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finished:
                    finished = True
                yield item
                if finished:
                    return
        finally:
            if not finished:  # cancelled or abandoned: give the blocks back
                with self._lock:
                    self._queues.pop(request.request_id, None)
                self.engine.abort(request.request_id)
                self._wake.set()

    def stats(self) -> dict[str, object]:
        return self.engine.stats()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the stepping thread; consumers still waiting get a RuntimeError instead of hanging."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=timeout)
        self._fail_all(RuntimeError("the engine was shut down"))
