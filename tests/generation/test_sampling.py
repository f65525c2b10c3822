"""Sampling: validation, effective values, greedy, seeded reproducibility independent of the batch."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from generation_helpers import run_random

from llmtrace.backend.generation.params import InvalidRequestError, SamplingParams
from llmtrace.backend.generation.sampler import EffectiveSampling, position_uniform, sample_row


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"presence_penalty": -3.0}, "presence_penalty"),
    ],
)
def test_invalid_values_rejected_with_the_field_named(kwargs, param):
    with pytest.raises(InvalidRequestError) as err:
        SamplingParams(**kwargs)
    assert err.value.param == param
    assert param in str(err.value)


def test_effective_values_after_clamping():
    eff = EffectiveSampling.from_params(SamplingParams(temperature=1e-6, top_k=100_000, seed=7), 1000)
    assert eff.temperature == 0.0 and eff.greedy
    assert eff.top_k == 0
    assert set(eff.clamped) == {"temperature", "top_k"}
    assert eff.seed == 7
    unseeded = EffectiveSampling.from_params(SamplingParams(), 1000)
    assert unseeded.seed >= 0 and not unseeded.greedy and unseeded.clamped == ()
    assert EffectiveSampling.from_params(SamplingParams(top_k=1), 1000).greedy


def test_sampling_span_reports_requested_and_effective(pipe):
    st = pipe.new_state(SamplingParams(temperature=1e-6, top_k=10**6, top_p=0.9, seed=3), [1, 2, 3])
    v = pipe.stage_values(st)["gen.sampling"]
    assert v["gen_ai.request.temperature"] == 1e-6 and v["llmtrace.sampling.effective_temperature"] == 0.0
    assert v["gen_ai.request.top_k"] == 1e6 and v["llmtrace.sampling.effective_top_k"] == 0
    assert v["llmtrace.sampling.greedy"] is True
    assert v["gen_ai.request.seed"] == 3


def test_greedy_is_argmax(pipe):
    logits = torch.randn(4, pipe.vocab_size, generator=torch.Generator().manual_seed(1))
    states = [pipe.new_state(SamplingParams(temperature=0.0), [5]) for _ in range(4)]
    assert pipe.sample(logits, states) == logits.argmax(dim=-1).tolist()


def test_top_k_top_p_min_p_restrict_the_candidates():
    logits = np.array([5.0, 4.0, 3.0, 2.0, -10.0], dtype=np.float32)
    seen = {
        name: {sample_row(logits, EffectiveSampling.from_params(p, 5), position_uniform(1, n)) for n in range(300)}
        for name, p in {
            "top_k2": SamplingParams(top_k=2, seed=1),
            "top_p": SamplingParams(top_p=0.5, seed=1),  # the first token alone already has 64% of the mass
            "min_p": SamplingParams(min_p=0.3, seed=1),  # p(1)/p(0) = 0.37 stays, p(2)/p(0) = 0.14 goes
            "free": SamplingParams(temperature=1.0, seed=1),
        }.items()
    }
    assert seen["top_k2"] == {0, 1}
    assert seen["top_p"] == {0}
    assert seen["min_p"] == {0, 1}
    assert {0, 1, 2, 3} <= seen["free"]


def test_sampling_follows_the_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1], dtype=np.float32))
    eff = EffectiveSampling.from_params(SamplingParams(seed=0), 3)
    counts = np.bincount([sample_row(logits, eff, position_uniform(0, n)) for n in range(3000)], minlength=3) / 3000
    assert np.allclose(counts, [0.6, 0.3, 0.1], atol=0.04)


def test_seeded_request_reproduces(pipe):
    params = SamplingParams(temperature=1.0, top_k=100, top_p=0.95, seed=1234, max_tokens=30)
    a = run_random(pipe, params, [1, 2, 3], seed=9)
    b = run_random(pipe, params, [1, 2, 3], seed=9)
    assert a.output_token_ids == b.output_token_ids
    c = run_random(pipe, SamplingParams(temperature=1.0, top_k=100, top_p=0.95, seed=4321, max_tokens=30), [1, 2, 3],
                   seed=9)
    assert c.output_token_ids != a.output_token_ids


def test_seeded_choice_independent_of_batch_composition(pipe):
    """The same sequence, same logits row, alone or among others in any order: same tokens."""
    g = torch.Generator().manual_seed(0)
    steps = [torch.randn(1, pipe.vocab_size, generator=g) * 2 for _ in range(20)]
    params = SamplingParams(temperature=0.9, top_k=50, seed=42, max_tokens=20)

    def run(batch_size: int, position: int) -> list[int]:
        target = pipe.new_state(params, [7])
        others = [pipe.new_state(SamplingParams(temperature=1.3, seed=s, max_tokens=20), [7]) for s in range(batch_size - 1)]
        for row in steps:
            noise = torch.randn(batch_size, pipe.vocab_size, generator=g)
            noise[position] = row[0]
            batch = others[:position] + [target] + others[position:]
            toks = pipe.sample(noise, batch)
            for s, t in zip(batch, toks, strict=True):
                pipe.accept(s, t, time.time_ns())
        return target.output_token_ids

    alone = run(1, 0)
    assert run(5, 2) == alone
    assert run(9, 8) == alone


def test_logits_shape_checked(pipe):
    with pytest.raises(ValueError):
        pipe.sample(torch.zeros(2, pipe.vocab_size), [pipe.new_state(SamplingParams(), [1])])


def test_seeded_request_reproduces_in_the_engine_whatever_the_batch(tokenizer):
    """Batch-invariant engine + per-request seeded generator: the same seeded request gives the same tokens
    alone and in a batch of other (differently seeded, different) requests."""
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.model.llama import LlamaModel

    model = LlamaModel.tiny("float32", seed=0)
    params = SamplingParams(temperature=0.9, top_p=0.9, seed=77, max_tokens=12, ignore_eos=True)
    prompt = tokenizer.encode("Once upon a time")

    def run(others: int) -> list[int]:
        engine = Engine.from_model(model, tokenizer, EngineConfig(num_blocks=128, batch_invariant=True))
        engine.add_request(EngineRequest("target", prompt, params))
        for i in range(others):
            engine.add_request(EngineRequest(f"o{i}", tokenizer.encode(f"Other prompt number {i} is longer"),
                                             SamplingParams(temperature=1.2, seed=i, max_tokens=12)))
        out: list[int] = []
        while engine.has_unfinished():
            for o in engine.step():
                if o.request_id == "target":
                    out += o.new_token_ids
        return out

    alone = run(0)
    assert len(alone) == 12
    assert run(5) == alone
