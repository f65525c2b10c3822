"""Plain helpers for the backend tests (fixtures stay in conftest.py). A module of its own name, because
``from conftest import`` finds whichever folder's conftest was imported first in a whole-suite run."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import torch

from llmtrace.backend.engine import Engine, EngineRequest, RequestOutput
from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.model.llama import LlamaModel


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


def cpu_can_build_native() -> bool:
    """AVX-512 F/BW/VNNI and F16C, and a C compiler: where the native kernels must build (a failure is a bug);
    elsewhere (an AVX2-only CPU) their tests have nothing to check."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    have = set(flags.split(":", 1)[1].split())
    return {"avx512f", "avx512bw", "avx512_vnni", "f16c"} <= have and shutil.which("gcc") is not None
