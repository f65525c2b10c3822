"""Settings resolve in one place: explicit argument > environment variable > default."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, cast

CaptureMode = Literal["none", "hashes", "full"]
CAPTURE_MODES: tuple[str, ...] = ("none", "hashes", "full")


A = TypeVar("A")
D = TypeVar("D")


def resolve(arg: A | None, env: str, default: D) -> A | D | str:
    """The argument if given, else the environment variable (a string) if set and not empty, else the default."""
    if arg is not None:
        return arg
    value = os.environ.get(env)
    if value is not None and value != "":
        return value
    return default


def resolve_db(arg: str | os.PathLike[str] | None = None) -> Path:
    return Path(str(resolve(arg, "LLMTRACE_DB", "llmtrace.duckdb")))


@dataclass(frozen=True, slots=True)
class Settings:
    db: Path | None
    otlp_endpoint: str | None
    service_name: str
    deploy: str | None
    capture: CaptureMode
    strict: bool  # unknown stage ids raise (tests) instead of warning
    shutdown_timeout_s: float = 5.0  # how long shutdown / interpreter exit may wait for the store

    @classmethod
    def resolve(
        cls,
        db: str | os.PathLike[str] | None = None,
        otlp_endpoint: str | None = None,
        service_name: str | None = None,
        deploy: str | None = None,
        capture: str | None = None,
        strict: bool | None = None,
        shutdown_timeout_s: float | None = None,
    ) -> Settings:
        mode = str(resolve(capture, "LLMTRACE_CAPTURE", "hashes")).lower()
        if mode not in CAPTURE_MODES:
            raise ValueError(f"capture must be one of {', '.join(CAPTURE_MODES)}, got {mode!r}")
        endpoint = resolve(otlp_endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None) or resolve(
            None, "OTEL_EXPORTER_OTLP_ENDPOINT", None
        )
        db_value = resolve(db, "LLMTRACE_DB", "llmtrace.duckdb")
        strict_value = resolve(strict, "LLMTRACE_STRICT", False)
        try:
            timeout = float(resolve(shutdown_timeout_s, "LLMTRACE_SHUTDOWN_TIMEOUT_S", 5.0))
        except ValueError:
            raise ValueError("LLMTRACE_SHUTDOWN_TIMEOUT_S must be a number of seconds") from None
        if not timeout >= 0:
            raise ValueError(f"shutdown_timeout_s must be >= 0, got {timeout}")
        return cls(
            db=None if db_value in ("", "none", False) else Path(str(db_value)),
            otlp_endpoint=str(endpoint) if endpoint else None,
            service_name=str(resolve(service_name, "OTEL_SERVICE_NAME", "llmtrace-app")),
            deploy=(str(d) if (d := resolve(deploy, "LLMTRACE_DEPLOY", None)) else None),
            capture=cast(CaptureMode, mode),  # one of CAPTURE_MODES, checked above
            strict=strict_value in (True, "1", "true", "yes"),
            shutdown_timeout_s=timeout,
        )
