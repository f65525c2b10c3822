"""``AsyncEngine``: the engine's ``step()`` on a background thread, results delivered to asyncio consumers.

``async for out in async_engine.generate(request)`` yields the request's ``RequestOutput``s; cancelling the
consumer (or breaking out of the loop) aborts the request so its blocks return to the pool.

Where the steps run matters on CPU: torch's OpenMP runtime (libgomp) throttles its worker threads' spinning
once a process has more OpenMP threads than cores, and a second thread running torch ops (the engine thread,
after the model was loaded on the main thread) is enough to trip that. On 2 cores a step then takes up to
twice as long. ``AsyncEngine(engine, background=False)`` starts no thread: the caller steps the engine with
``run()`` on the thread that loaded the model (``llmtrace serve`` does this on its main thread and serves
HTTP from a second one, which never touches torch).
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
    def __init__(self, engine: Engine, *, background: bool = True) -> None:
        self.engine = engine
        self._queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[RequestOutput | BaseException]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        # the OS id of the thread stepping the engine (set when it starts): the server reads its wait for a CPU
        self.stepping_thread: int | None = None
        if background:
            self._thread = threading.Thread(target=self.run, name="llmtrace-engine", daemon=True)
            self._thread.start()

    def run(self, until: threading.Event | None = None) -> None:
        """Step the engine on this thread until ``shutdown()`` (or until ``until`` is set; call ``wake()``
        after setting it). Only for ``background=False``: the background thread runs this itself."""
        self.stepping_thread = threading.get_native_id()
        while not self._stop and not (until is not None and until.is_set()):
            if not self.engine.has_unfinished():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # a broken step fails every waiting consumer instead of hanging them
                log.exception("engine step failed")
                self._fail_all(exc)
                continue
            except BaseException as exc:  # KeyboardInterrupt on the caller's thread: fail them, then stop
                self._fail_all(RuntimeError(f"the engine was interrupted: {exc!r}"))
                raise
            self._deliver(outputs)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        # One wake-up per event loop per step, not one per output: at 16 sequences a step that is 16 fewer
        # cross-thread calls for the serving loop to process.
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, RequestOutput]]] = {}
        with self._lock:
            for out in outputs:
                target = self._queues.get(out.request_id)
                if out.finished:
                    self._queues.pop(out.request_id, None)
                if target is not None:
                    batches.setdefault(target[0], []).append((target[1], out))
        for loop, batch in batches.items():
            try:
                loop.call_soon_threadsafe(_put_all, batch)
            except RuntimeError:  # that consumer's event loop is closed: nobody is left to read these
                pass

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

    def wake(self) -> None:
        """Interrupt an idle ``run()`` so it re-checks its stop conditions now instead of within 0.5 s."""
        self._wake.set()

    def stats(self) -> dict[str, object]:
        return self.engine.stats()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the stepping thread; consumers still waiting get a RuntimeError instead of hanging."""
        self._stop = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)
        self._fail_all(RuntimeError("the engine was shut down"))


def _put_all(batch: list[tuple[asyncio.Queue, RequestOutput]]) -> None:
    for queue, out in batch:
        queue.put_nowait(out)
