"""Fixtures shared by every test area: strict tracing, a temporary store, and the real server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from testkit import RunningServer, start_server, stop_server

os.environ.setdefault("LLMTRACE_STRICT", "1")  # unknown stage ids raise in tests


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "traces.duckdb"


@pytest.fixture
def traced(store_path: Path) -> Iterator[Path]:
    """``llmtrace.init`` into a fresh store for the test; flushed and shut down afterwards."""
    import llmtrace

    llmtrace.init(db=store_path, service_name="test", strict=True)
    try:
        yield store_path
    finally:
        llmtrace.shutdown()


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real server with the tiny random model, shared by the session's tests (read-mostly)."""
    server = start_server(tmp_path_factory.mktemp("tiny-server"))
    try:
        yield server
    finally:
        stop_server(server)
