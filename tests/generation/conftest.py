"""Shared fixtures for the generation tests: the real tokenizer, a pipeline over it, the real model."""

from __future__ import annotations

import pytest

from llmtrace.backend.generation.pipeline import GenerationPipeline
from llmtrace.backend.model.pull import default_model_path
from llmtrace.backend.model.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def model_path():
    path = default_model_path()
    if not path.exists():
        pytest.fail(f"default model missing at {path}; run `llmtrace model pull`")
    return path


@pytest.fixture(scope="session")
def tokenizer(model_path) -> Tokenizer:
    return Tokenizer.from_gguf(model_path)


@pytest.fixture(scope="session")
def pipe(tokenizer) -> GenerationPipeline:
    return GenerationPipeline(tokenizer, eos_token_ids=tokenizer.eos_token_ids, vocab_size=tokenizer.vocab_size)


@pytest.fixture(scope="session")
def model(real_f32):
    """The float32 model tests/conftest.py loads once for every area (the tests here only read it)."""
    return real_f32
