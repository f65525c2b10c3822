"""The request body as a JSON object, with every malformed shape a 400 (never a 500): invalid UTF-8, lone
surrogates, NaN and overflowing numbers, nesting past 1,024 levels and integers of any length are refused
or parsed by orjson in bounded time; and running blocking work on a worker thread without leaving it
writing to a request that was already given up."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import orjson

from llmtrace.backend.server.errors import APIError, bad_request

T = TypeVar("T")


def decode_body(raw: bytes) -> tuple[Any, APIError | None]:
    """(the JSON object, None) or (None, the 400 to answer)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, bad_request(f"request body is not valid UTF-8 (byte {exc.start}: {exc.reason})")
    if not text.strip():
        return None, bad_request("request body is empty; expected a JSON object")
    try:
        # orjson rather than json: no recursion (depth is capped at 1,024), no 4,300-digit integer limit
        # error (big integers become floats, checked by the field readers), lone surrogates refused.
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, bad_request(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} "
                                 f"column {exc.colno}")
    if not isinstance(body, dict):
        return None, bad_request(f"request body must be a JSON object, got {type(body).__name__}")
    return body, None


async def off_loop(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker thread. A thread cannot be stopped, so when the caller is cancelled (the
    client left) this still waits for ``fn`` to finish before letting the cancellation through: the
    caller then ends its pass span after ``fn`` has written its last value to it, never before."""
    fut = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait({fut})
        if not fut.cancelled():
            fut.exception()  # retrieved, so asyncio does not log it as never retrieved
        raise
