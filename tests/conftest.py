"""Fixtures shared by every test area: strict tracing, a temporary store, the real server and the real model."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from testkit import RunningServer, start_server, stop_server

if TYPE_CHECKING:
    from llmtrace.backend.model.llama import LlamaModel

os.environ.setdefault("LLMTRACE_STRICT", "1")  # unknown stage ids raise in tests
# One OpenMP thread in every process the tests start (each `llmtrace serve`, demo, CLI run inherits this env):
# on a 2-core box that also runs pytest, the clients and often a second server, torch's two OpenMP threads
# spin-wait for each other and a server's small ops get many times slower (time_breakdown's eight-shape test:
# 80.5 s -> 11.4 s side by side at load 11-13). What the tests assert does not depend on the thread count;
# the tests of two-thread kernels set their threads themselves. A caller's own setting wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# LiteLLM fetches its price map from GitHub as it is imported, retrying for ~7 s where there is no network (the
# tests never reach past 127.0.0.1): every process the tests start that imports it (the docs' LiteLLM page, the
# foreign apps) reads the copy it ships instead.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """In-process torch runs on one intra-op thread (the backend and generation tests, the engine of an in-process
    server): on a busy 2-core box two OpenMP threads spin-wait for each other and small ops get 10-20x slower (the
    real-model speculation test in tests/generation: 22.3 s -> 2.6 s at load 7). Restored after each test; a test
    that wants more threads sets them itself. Servers started as processes keep torch's default. Nothing is
    imported here: while torch is not loaded there is nothing to set."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
