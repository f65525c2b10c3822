"""Batch-invariant mode: a sequence's logits are bit-identical whatever shares its steps (and however its
prefill is chunked). The default mode is allowed to differ, and on this CPU it does."""

from __future__ import annotations

import random

import torch
from engine_helpers import greedy, random_prompt, run_all, tokens_of

from llmtrace.backend.engine import EngineRequest


def run_with(make_engine, target: list[int], companions: list[list[int]], invariant: bool, **config):  # noqa: ANN001, ANN003, ANN201
    engine = make_engine(num_blocks=128, batch_invariant=invariant, **config)
    rows: list[torch.Tensor] = []
    engine.logits_sink = lambda rid, r: rows.append(r.clone()) if rid == "target" else None
    reqs = [EngineRequest(f"c{i}", p, greedy(10)) for i, p in enumerate(companions)]
    outs = run_all(engine, [*reqs[:1], EngineRequest("target", target, greedy(10)), *reqs[1:]])
    return tokens_of(outs["target"]), torch.cat(rows)


def compositions(rng: random.Random) -> list[tuple[list[list[int]], dict]]:
    return [
        ([], {}),
        ([random_prompt(rng, 7), random_prompt(rng, 50)], {}),
        ([random_prompt(rng, n) for n in (3, 21, 40, 12, 5)], {"max_num_batched_tokens": 24, "max_prefill_chunk": 8}),
    ]


def test_invariant_mode_is_bitwise_identical_across_batches(make_engine) -> None:  # noqa: ANN001
    rng = random.Random(41)
    target = random_prompt(rng, 30)
    results = [run_with(make_engine, target, comp, True, **cfg) for comp, cfg in compositions(rng)]
    tokens0, logits0 = results[0]
    for tokens, logits in results[1:]:
        assert tokens == tokens0
        assert torch.equal(logits, logits0)


def test_default_mode_may_differ_across_batches(make_engine) -> None:  # noqa: ANN001
    rng = random.Random(41)
    target = random_prompt(rng, 30)
    results = [run_with(make_engine, target, comp, False, **cfg) for comp, cfg in compositions(rng)]
    _, logits0 = results[0]
    assert any(not torch.equal(logits, logits0) for _, logits in results[1:])
    for _, logits in results[1:]:  # different bits, same numbers to float tolerance
        assert (logits - logits0).abs().max().item() < 2e-4
