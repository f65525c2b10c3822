"""Shared fixtures for the backend tests: the real tokenizer, the tiny random model, the real model."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest, RequestOutput
from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.model.llama import LlamaModel
from llmtrace.backend.model.pull import default_model_path


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Correctness tests run on one intra-op thread: on a busy 2-core box two OpenMP threads spin-wait
    for each other and small ops get 10-20x slower. Restored after each test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
def real_f32(gguf_path: Path) -> LlamaModel:
    return LlamaModel.from_gguf(gguf_path, "float32")


@pytest.fixture
def make_engine(tiny: LlamaModel, tokenizer) -> Callable[..., Engine]:  # noqa: ANN001
    def make(model: LlamaModel | None = None, **config: object) -> Engine:
        return Engine.from_model(model or tiny, tokenizer, EngineConfig(**config))  # type: ignore[arg-type]

    return make


def greedy(max_tokens: int = 8, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)  # type: ignore[arg-type]


def random_prompt(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(300, 40000) for _ in range(length)]


def run_all(engine: Engine, requests: list[EngineRequest], max_steps: int = 10_000) -> dict[str, list[RequestOutput]]:
    """Add the requests, step until done, return every output per request id."""
    for r in requests:
        engine.add_request(r)
    outs: dict[str, list[RequestOutput]] = {r.request_id: [] for r in requests}
    for _ in range(max_steps):
        if not engine.has_unfinished():
            break
        for o in engine.step():
            outs[o.request_id].append(o)
    else:
        raise AssertionError("engine did not finish")
    return outs


def tokens_of(outputs: list[RequestOutput]) -> list[int]:
    return [t for o in outputs for t in o.new_token_ids]


def dense_greedy(model: LlamaModel, prompt: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy continuation with the dense reference: tokens and the logits row that chose each."""
    ids = list(prompt)
    rows = []
    for _ in range(n):
        row = model.forward_dense(ids, last_only=True)[0]
        rows.append(row)
        ids.append(int(row.argmax()))
    return ids[len(prompt):], rows
