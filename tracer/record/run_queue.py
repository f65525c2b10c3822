"""How long threads were ready to run but waited for a CPU: Linux's run-queue wait, which the kernel keeps per
thread in ``/proc/<task>/schedstat`` (on-CPU ns, waiting ns, slices). Read before a call and again at its first
token, the difference is the time the call's first token waited for the machine rather than for its own work:
the part of a TTFT that a busier machine adds and a deploy does not. ``llmtrace check --ttft`` nets it out to tell
the two apart.

Two scopes: the calling thread (the client middleware: the thread that sends the request and reads the answer;
about 4 us a reading) and named threads of this process (the bundled server: its HTTP loop and the threads
stepping its engines, the path a lone request's first token takes). Not every thread of the process: the sum
over all of them counts waits that delay nothing (a span writer's, torch's pool threads waiting side by side)
and came out above the TTFT itself on a loaded machine (42 ms of wait in a 33 ms TTFT). A pool thread's wait
for a CPU shows on the engine thread as CPU time instead (it spins at the barrier). Elsewhere (no /proc,
another OS) both are None and nothing is recorded.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

THREAD_SCHEDSTAT = "/proc/thread-self/schedstat"
_TASKS = "/proc/self/task"
_available = os.path.exists(THREAD_SCHEDSTAT)


def wait_in(fd: int) -> int:
    """The cumulative run-queue wait (ns) in an open schedstat file (its second field; read from the start,
    so one descriptor can be read again and again, as the engine's CPU clock does each step)."""
    return int(os.pread(fd, 96, 0).split()[1])


def _wait_of(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return wait_in(fd)
    finally:
        os.close(fd)


def thread_wait() -> tuple[int, int] | None:
    """(the calling thread's id, its cumulative run-queue wait in ns), or None where the kernel does not say."""
    global _available
    if not _available:
        return None
    try:
        return threading.get_ident(), _wait_of(THREAD_SCHEDSTAT)
    except (OSError, ValueError, IndexError):
        _available = False
        return None


def thread_wait_since(start: tuple[int, int] | None) -> int | None:
    """The calling thread's run-queue wait (ns) since ``start`` (a thread_wait() reading); None when there is
    none, or when ``start`` was read on another thread (a stream handed to a worker: the two do not subtract)."""
    if start is None:
        return None
    now = thread_wait()
    if now is None or now[0] != start[0]:
        return None
    return max(now[1] - start[1], 0)


def threads_wait(thread_ids: Iterable[int]) -> int | None:
    """The cumulative run-queue wait (ns) of this process's threads ``thread_ids`` (OS thread ids, as
    ``threading.get_native_id()`` gives them), or None where the kernel does not say. A thread that ended is
    skipped (it takes its wait with it: a difference of two readings is floored at 0 by the caller)."""
    if not _available:
        return None
    total = 0
    for tid in thread_ids:
        try:
            total += _wait_of(f"{_TASKS}/{tid}/schedstat")
        except (OSError, ValueError, IndexError):
            continue
    return total
