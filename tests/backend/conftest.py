"""Shared fixtures for the backend tests: the real tokenizer, the tiny random model, the real model in
bfloat16 (``real_f32`` is tests/conftest.py's, so that every area can share its one load)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from llmtrace.backend.engine import Engine, EngineConfig
from llmtrace.backend.model.llama import LlamaModel
from llmtrace.backend.model.pull import default_model_path


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    path = default_model_path()
    if not path.is_file():
        pytest.fail(f"default model missing at {path}: run `llmtrace model pull` (make setup does)")
    return path


@pytest.fixture(scope="session")
def tokenizer(gguf_path: Path):  # noqa: ANN201 - the generation helper's Tokenizer
    from llmtrace.backend.model.tokenizer import Tokenizer

    return Tokenizer.from_gguf(gguf_path)


@pytest.fixture(scope="session")
def tiny() -> LlamaModel:
    return LlamaModel.tiny("float32", seed=0)


@pytest.fixture(scope="session")
def real_bf16(gguf_path: Path) -> LlamaModel:
    """Loaded once for the session (it was loaded by three modules, ~4 s each under load): the tests only
    read it, and the two that switch a kernel off do it through monkeypatch, which puts it back."""
    return LlamaModel.from_gguf(gguf_path, "bfloat16")


@pytest.fixture
def make_engine(tiny: LlamaModel, tokenizer) -> Callable[..., Engine]:  # noqa: ANN001
    def make(model: LlamaModel | None = None, **config: object) -> Engine:
        return Engine.from_model(model or tiny, tokenizer, EngineConfig(**config))  # type: ignore[arg-type]

    return make
