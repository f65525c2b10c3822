"""Admission control: at most ``max_running`` requests generate at once, at most ``max_queued`` wait for a
slot, and anything past that is shed (HTTP 429). Waiting is first come, first served."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

Decision = Literal["admitted", "queued", "shed"]


class Shed(Exception):
    """The server is full: the caller answers 429 with ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Ticket:
    decision: Decision
    queue_wait_ms: float
    queue_depth: int  # requests waiting when this one arrived
    running: int  # requests running when this one arrived
    max_running: int


class Admission:
    """Counts running requests and queues the rest. Lives on the event loop; not thread-safe."""

    def __init__(self, max_running: int, max_queued: int) -> None:
        if max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {max_running}")
        if max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {max_queued}")
        self.max_running = max_running
        self.max_queued = max_queued
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.shed_total = 0
        self.admitted_total = 0
        self._recent_run_s = 1.0  # smoothed request duration, for Retry-After

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> Ticket:
        depth, running = len(self._waiters), self.running
        if running < self.max_running and not self._waiters:
            self.running += 1
            self.admitted_total += 1
            return Ticket("admitted", 0.0, depth, running, self.max_running)
        if depth >= self.max_queued:
            self.shed_total += 1
            # The queue drains about max_running requests per request duration.
            wait = self._recent_run_s * (depth + 1) / self.max_running
            raise Shed(
                f"server is at capacity ({running} running, {depth} queued; limits {self.max_running} "
                f"running, {self.max_queued} queued); retry later",
                retry_after_s=max(1.0, wait),
            )
        t0 = time.perf_counter()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut in self._waiters:
                self._waiters.remove(fut)
            elif fut.done() and not fut.cancelled():
                # The slot was handed to us just as we were cancelled: pass it on.
                self._release_slot()
            raise
        self.admitted_total += 1
        return Ticket("queued", (time.perf_counter() - t0) * 1e3, depth, running, self.max_running)

    def release(self, run_s: float | None = None) -> None:
        if run_s is not None:
            self._recent_run_s = 0.8 * self._recent_run_s + 0.2 * run_s
        self._release_slot()

    def _release_slot(self) -> None:
        # Hand the slot straight to the oldest waiter, so the running count never dips and lets a newcomer
        # jump the queue.
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.running -= 1
