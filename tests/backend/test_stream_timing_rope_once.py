"""Work on the first token's path done once per forward, not once per layer: a bfloat16 prefill on a CPU
whose native rotary kernel runs builds no torch cos/sin tables and checks the kernel's positions and tables
once (it took the largest position, a tensor reduction, in every one of the 30 layers); where the kernel
does not run, the tables are built once for the forward."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import cpu_can_build_native, greedy, random_prompt, run_all

from llmtrace.backend.engine import Engine, EngineRequest
from llmtrace.backend.engine.config import EngineConfig
from llmtrace.backend.model import cpu_native
from llmtrace.backend.model.llama import LlamaModel


def _counted(calls: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return wrapper


def _prefill(model: LlamaModel, tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], list[int]]:
    calls: Counter[str] = Counter()
    monkeypatch.setattr(cpu_native, "rope_applies", _counted(calls, "applies", cpu_native.rope_applies))
    monkeypatch.setattr(cpu_native, "rope_rows", _counted(calls, "rows", cpu_native.rope_rows))
    monkeypatch.setattr(LlamaModel, "_rope_tables", _counted(calls, "tables", LlamaModel._rope_tables))
    engine = Engine.from_model(model, tokenizer, EngineConfig(dtype="bfloat16", enable_prefix_cache=False))
    prompt = random_prompt(random.Random(3), 96)
    outs = run_all(engine, [EngineRequest(request_id="r", prompt_token_ids=prompt, params=greedy(1))])
    return calls, [t for o in outs["r"] for t in o.new_token_ids]


def test_native_rotary_prefill_builds_no_tables_and_checks_once(real_bf16: LlamaModel, tokenizer: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if not real_bf16._native_rows:
        if cpu_can_build_native():
            pytest.fail(f"the native row kernels should build on this CPU: {cpu_native.load_error}")
        pytest.skip(f"no native row kernels on this machine: {cpu_native.load_error}")
    calls, tokens = _prefill(real_bf16, tokenizer, monkeypatch)
    layers = real_bf16.config.num_layers
    assert len(tokens) == 1
    # one prefill forward: one check, every layer rotated in place, no torch tables
    assert calls == Counter({"applies": 1, "rows": layers}), calls


def test_torch_rotary_builds_its_tables_once_per_forward(real_bf16: LlamaModel, tokenizer: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_bf16, "_native_rows", False)  # the torch-op rotary (as on a CPU without the library)
    calls, tokens = _prefill(real_bf16, tokenizer, monkeypatch)
    assert len(tokens) == 1
    assert calls == Counter({"tables": 1}), calls
