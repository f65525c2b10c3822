"""Typed reads of request-body fields: a wrong type is a 400 that names the field, never a 500."""

from __future__ import annotations

import math
from typing import Any

from llmtrace.backend.server.errors import bad_request

_MISSING = object()


def get_number(body: dict[str, Any], key: str, default: Any = None, *, integer: bool = False) -> Any:
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if integer else "a number"
        raise bad_request(f"'{key}' must be {kind}, got {type(value).__name__} {_short(value)}", key)
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise bad_request(f"'{key}' must be an integer, got {value}", key)
        value = int(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise bad_request(f"'{key}' must be a finite number, got {value}", key)
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
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise bad_request(f"'{key}' must be a list of integers", key)


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
