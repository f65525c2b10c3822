"""Keep freed memory in the process heap instead of returning it to the OS after every step.

glibc serves large allocations (over 128 KiB by default) with fresh ``mmap``s and unmaps them on free, so
every big temporary tensor of a forward pass (gathered KV blocks, activations, logits) is page-faulted in
again on each step. On a virtual machine those faults cost more than the arithmetic: a batched decode
step's KV gather ran ~10x slower with them. Raising the mmap and trim thresholds makes glibc reuse the
heap. Process-wide and harmless elsewhere; skipped where there is no glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30  # allocations up to 1 GiB come from the heap; freed memory stays for reuse
_done: list[bool] = []


def keep_freed_memory() -> bool:
    """Apply the glibc settings once per process; True when they are in effect."""
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _THRESHOLD))
        except (OSError, AttributeError):  # not glibc (musl, ...): nothing to tune
            ok = False
    _done.append(ok)
    return ok
