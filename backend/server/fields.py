"""Typed reads of request-body fields: a wrong type is a 400 that names the field, never a 500."""

from __future__ import annotations

import math
from typing import Any

from llmtrace.backend.server.errors import bad_request

_MISSING = object()


# The widest integer any field takes: the store keeps request values as BIGINT, and no count, seed or
# sampling knob of this server means anything past it.
INT64 = (-(2**63), 2**63 - 1)
# Token counts (max_tokens and its aliases): past this a request is not asking for a number of tokens.
MAX_TOKENS_BOUND = 2**31 - 1


def get_number(body: dict[str, Any], key: str, default: Any = None, *, integer: bool = False,
               maximum: int | None = None) -> Any:
    """A number field, or ``default`` when absent or null. ``integer``: a JSON integer only, within int64
    (up to ``maximum`` when given). A float is refused even when whole (``1e308`` is
    "integral" and turned into a 309-digit token budget), as OpenAI's and Anthropic's APIs refuse it; a
    boolean is never a number."""
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and isinstance(value, float)):
        kind = "an integer" if integer else "a number"
        raise bad_request(f"'{key}' must be {kind}, got {type(value).__name__} {_short(value)}", key)
    if isinstance(value, float) and not math.isfinite(value):
        raise bad_request(f"'{key}' must be a finite number, got {value}", key)
    if integer:
        lo, hi = INT64[0], INT64[1] if maximum is None else maximum
        if not lo <= value <= hi:
            raise bad_request(f"'{key}' must be an integer from {lo} to {hi}, got {_short(value)}", key)
    return value


def get_bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{key}' must be a boolean, got {type(value).__name__} {_short(value)}", key)
    return value


def get_str(body: dict[str, Any], key: str, default: str | None = None, *, required: bool = False) -> str | None:
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise bad_request(f"'{key}' is required", key)
        return default
    if not isinstance(value, str):
        raise bad_request(f"'{key}' must be a string, got {type(value).__name__} {_short(value)}", key)
    return value


def get_str_list(body: dict[str, Any], key: str) -> tuple[str, ...]:
    """A string or a list of strings (OpenAI ``stop``); () when absent."""
    value = body.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v for v in value if v)
    raise bad_request(f"'{key}' must be a string or a list of strings", key)


def get_int_list(body: dict[str, Any], key: str) -> tuple[int, ...]:
    value = body.get(key)
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and INT64[0] <= v <= INT64[1]
                                       for v in value):
        return tuple(value)
    raise bad_request(f"'{key}' must be a list of integers (64-bit)", key)


def get_dict(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request(f"'{key}' must be an object, got {type(value).__name__}", key)
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
