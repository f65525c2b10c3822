"""The engine thread's own CPU time and its run-queue wait, read around each step, so a pass's prefill
says how much CPU work it took and how long the engine waited for a CPU while doing it. A busier machine
(another process, a noisy CI neighbour) shows as wait with the work unchanged; a slower deploy (a kernel,
more uncached tokens) as more work. ``llmtrace check --ttft`` uses the two to tell them apart.

The CPU time is ``time.thread_time_ns`` everywhere. Linux keeps the wait per thread in
/proc/thread-self/schedstat (on-CPU ns, runnable-but-waiting ns, slices); the file is kept open and re-read
with pread (about a microsecond). Its on-CPU figure is not used: for the running thread it is only as fresh
as the last scheduler tick (a 2.5 ms busy loop read 0.006 ms there), while the wait only grows while the
thread is off the CPU, so it is current whenever the thread itself reads it. Elsewhere the wait is unknown
(None).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from llmtrace.tracer.record import run_queue


class ThreadCpuClock:
    """Readings for the thread that first reads it (the engine steps on one thread)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._thread: int | None = None

    def read(self) -> tuple[int, int | None]:
        """(on-CPU ns, run-queue wait ns or None), both cumulative for the calling thread."""
        ident = threading.get_ident()
        if self._thread != ident:  # the first read, or the engine moved to another thread
            self.close()
            self._thread = ident
            try:
                self._fd = os.open(run_queue.THREAD_SCHEDSTAT, os.O_RDONLY)
            except OSError:
                self._fd = None
        if self._fd is not None:
            try:
                return time.thread_time_ns(), run_queue.wait_in(self._fd)
            except (OSError, ValueError, IndexError):
                self.close()
        return time.thread_time_ns(), None

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        # ``_close`` is bound at definition: at interpreter exit the module's globals (``os``) may already be
        # None when the last engine is collected
        if self._fd is not None:
            try:
                _close(self._fd)
            except OSError:
                pass
            self._fd = None

    def __del__(self) -> None:
        self.close()
