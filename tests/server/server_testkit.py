"""Helpers for the server tests: polling the server's store while it runs (it flushes every ~0.5 s)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from llmtrace.tracer.storage.store import StoreError, read_connection


def query(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with read_connection(db) as conn:
        return conn.execute(sql, params or []).fetchall()


def wait_rows(db: Path, sql: str, params: list[Any] | None = None, *,
              until: Callable[[list[tuple[Any, ...]]], bool] = bool, timeout_s: float = 20.0) -> list[tuple[Any, ...]]:
    """Run ``sql`` until ``until(rows)`` holds (the server exports in the background)."""
    deadline = time.monotonic() + timeout_s
    rows: list[tuple[Any, ...]] = []
    while time.monotonic() < deadline:
        try:
            rows = query(db, sql, params)
        except StoreError:  # not created yet (nothing flushed), or briefly held by the writer
            rows = []
        else:
            if until(rows):
                return rows
        time.sleep(0.25)
    raise AssertionError(f"store never satisfied the condition; last rows: {rows[:5]}")


def stats(base_url: str) -> dict[str, Any]:
    return httpx.get(f"{base_url}/stats", timeout=5).json()


def wait_idle(base_url: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """Wait until no request is in flight and every replica's pool has all its blocks available again."""
    deadline = time.monotonic() + timeout_s
    s: dict[str, Any] = {}
    while time.monotonic() < deadline:
        s = stats(base_url)
        reps = s["replicas"].values()
        if s["in_flight"] == 0 and all(r["in_flight"] == 0 and r["running"] == 0 and r["waiting"] == 0
                                       and r["available_blocks"] == r["num_blocks"] for r in reps):
            return s
        time.sleep(0.1)
    raise AssertionError(f"server did not return to idle: {s}")


def stages_of(db: Path, trace_id: str) -> list[str]:
    return [r[0] for r in query(db, "SELECT stage FROM stages WHERE trace_id = ? ORDER BY stage_number", [trace_id])]
