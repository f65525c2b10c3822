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

# Every environment variable llmtrace reads, and what it sets. Code reads them through ``env`` (or ``resolve``),
# never os.environ: tests/tracer/test_settings_env.py fails on an LLMTRACE_ name read anywhere else or not
# listed here.
ENVIRONMENT: dict[str, str] = {
    "LLMTRACE_DB": "the store's DuckDB file (default ./llmtrace.duckdb)",
    "LLMTRACE_STORE": "a store URL for the readers (clickhouse://, chdb://, a Parquet glob) instead of --db",
    "LLMTRACE_CAPTURE": "none | hashes | full: how much prompt and output text is kept (default hashes)",
    "LLMTRACE_DEPLOY": "the deploy label recorded on every span",
    "LLMTRACE_STRICT": "1: unknown stage ids raise instead of warning (the tests set it)",
    "LLMTRACE_SHUTDOWN_TIMEOUT_S": "how long shutdown may wait for the store (default 5 s)",
    "LLMTRACE_HASH_KEY": "the key of the keyed hashes, hex (default: one kept beside the store)",
    "LLMTRACE_PRICES": "a JSON file of prices per model that wins over the bundled ones",
    "LLMTRACE_COLLECT_TOKEN": "the bearer token `llmtrace collect` asks senders for",
    "LLMTRACE_PASS_TABLE": "0: the readers use the plain passes view, not the pass table",
    "LLMTRACE_TARGET_TTFT_MS": "a time-to-first-token target; a setting's expected cost is info below it",
    "LLMTRACE_TARGET_TPOT_MS": "a time-per-output-token target; a setting's expected cost is info below it",
    "LLMTRACE_API_KEY": "the key `llmtrace serve` asks clients for",
    "LLMTRACE_CACHE": "where `llmtrace model pull` keeps models (default ~/.cache/llmtrace)",
    "LLMTRACE_NATIVE": "0: the engine does not build or use its native CPU kernels",
    "LLMTRACE_CPU_PATH": "forces the engine's CPU compute path (e.g. the no-bf16 fallback on a bf16 CPU)",
    "LLMTRACE_PREFILL_GEMM": "auto | float32 | int16: the engine's prefill matmuls on a CPU (int16: AVX-512 VNNI)",
}


def env(name: str) -> str | None:
    """The variable's value, stripped; None when it is unset or empty. ``name`` must be in ENVIRONMENT."""
    if name not in ENVIRONMENT:
        raise KeyError(f"{name} is not a setting llmtrace reads (add it to tracer/settings.py ENVIRONMENT)")
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


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
