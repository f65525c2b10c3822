"""Fixtures shared by every test area: strict tracing, a temporary store, the real server and the real model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from testkit import RunningServer, start_server, stop_server

if TYPE_CHECKING:
    from llmtrace.backend.model.llama import LlamaModel

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
def real_f32() -> LlamaModel:
    """The bundled model in float32, loaded once per session for every area that reads it (~3 s and ~0.5 GB each
    time it is loaded); tests only read it. Imported here, not at the top: most areas never need torch."""
    from llmtrace.backend.model.llama import LlamaModel
    from llmtrace.backend.model.pull import default_model_path

    path = default_model_path()
    if not path.is_file():
        pytest.fail(f"default model missing at {path}: run `llmtrace model pull` (make setup does)")
    return LlamaModel.from_gguf(path, "float32")


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real server with the tiny random model, shared by the session's tests (read-mostly)."""
    server = start_server(tmp_path_factory.mktemp("tiny-server"))
    try:
        yield server
    finally:
        stop_server(server)
