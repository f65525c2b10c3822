"""Penalties: repetition over prompt and output, frequency/presence over output (OpenAI definition)."""

from __future__ import annotations

import numpy as np
import torch

from llmtrace.backend.generation.params import Constraint, SamplingParams
from llmtrace.backend.generation.penalties import PenaltyState


def test_repetition_over_prompt_and_output():
    p = PenaltyState([1, 2], 6, repetition=2.0)
    p.append(4)
    logits = np.array([1.0, 2.0, -2.0, 3.0, 4.0, -1.0], dtype=np.float32)
    out = p.apply(logits)
    assert out.tolist() == [1.0, 1.0, -4.0, 3.0, 2.0, -1.0]  # positive / r, negative * r, unseen untouched
    assert logits.tolist() == [1.0, 2.0, -2.0, 3.0, 4.0, -1.0]  # the input is not modified


def test_frequency_and_presence_over_output_only():
    p = PenaltyState([0, 1], 4, frequency=0.5, presence=1.0)
    for t in (2, 2, 3):
        p.append(t)
    out = p.apply(np.zeros(4, dtype=np.float32))
    # token 2: 0.5*2 + 1 = 2; token 3: 0.5*1 + 1 = 1.5; prompt tokens are not penalized
    assert out.tolist() == [0.0, 0.0, -2.0, -1.5]


def test_speculative_extra_tokens_count():
    p = PenaltyState([], 4, frequency=1.0)
    p.append(1)
    assert p.apply(np.zeros(4, dtype=np.float32), extra_output=[1, 2]).tolist() == [0.0, -2.0, -1.0, 0.0]


def test_penalties_inactive_by_default_return_same_tensor():
    p = PenaltyState([1], 4)
    x = np.zeros(4, dtype=np.float32)
    assert not p.active and p.apply(x) is x


def test_penalties_apply_before_sampling_change_greedy_choice(pipe):
    logits = torch.zeros(1, pipe.vocab_size)
    logits[0, 10] = 2.0
    logits[0, 11] = 1.5
    st = pipe.new_state(SamplingParams(temperature=0.0, repetition_penalty=2.0), [10])
    assert pipe.sample(logits, [st]) == [11]  # 2.0 / 2 = 1.0 < 1.5


def test_penalties_on_structured_output_flagged(pipe):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    st = pipe.new_state(SamplingParams(frequency_penalty=0.5, constraint=Constraint("json_schema", schema)), [1])
    assert pipe.stage_values(st)["gen.penalties"]["llmtrace.penalties.on_structured_output"] is True
    plain = pipe.new_state(SamplingParams(frequency_penalty=0.5), [1])
    assert pipe.stage_values(plain)["gen.penalties"]["llmtrace.penalties.on_structured_output"] is False
    values = pipe.stage_values(st)["gen.penalties"]
    assert values["gen_ai.request.frequency_penalty"] == 0.5 and values["llmtrace.penalties.repetition"] == 1.0
