"""Reasoning budget: count thinking tokens, force the close delimiter at the budget."""

from __future__ import annotations

import json
import time

import torch

from llmtrace.backend.generation.params import Constraint, ReasoningConfig, SamplingParams


def drive(pipe, st, steps=200, seed=0):
    """Random logits that never choose the close delimiter themselves (a model that would think forever)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if st.finished:
            break
        logits = torch.randn(1, pipe.vocab_size, generator=g)
        logits[0, list(pipe.eos_token_ids)] = -1e9
        pipe.accept(st, pipe.sample(logits, [st])[0], time.time_ns())


def test_budget_forces_close(pipe, tokenizer):
    cfg = ReasoningConfig(budget=12, open_delimiter="<think>", close_delimiter="</think>")
    st = pipe.new_state(SamplingParams(seed=1, max_tokens=40, reasoning=cfg), [1])
    for tok in tokenizer.encode("<think>"):
        pipe.accept(st, tok, time.time_ns())
    drive(pipe, st)
    text = st.text
    assert text.startswith("<think>") and "</think>" in text
    thinking = text[len("<think>"): text.index("</think>")]
    assert len(tokenizer.encode(thinking)) <= 14  # ~budget (token boundaries may re-merge)
    v = pipe.stage_values(st)["gen.reasoning_budget"]
    assert v["llmtrace.reasoning.budget"] == 12
    assert v["llmtrace.reasoning.forced_close"] is True
    close_len = len(tokenizer.encode("</think>"))
    assert 12 <= v["gen_ai.usage.reasoning.output_tokens"] <= 12 + close_len
    assert st.finish_reason == "length"  # the answer continued after the forced close


def test_no_forcing_when_model_closes_in_time(pipe, tokenizer):
    cfg = ReasoningConfig(budget=50)
    st = pipe.new_state(SamplingParams(temperature=0.0, max_tokens=20, reasoning=cfg), [1])
    for tok in tokenizer.encode("<think>short</think>answer"):
        pipe.accept(st, tok, time.time_ns())
    v = pipe.stage_values(st)["gen.reasoning_budget"]
    assert v["llmtrace.reasoning.forced_close"] is False
    assert 0 < v["gen_ai.usage.reasoning.output_tokens"] < 8
    assert st.reasoning.phase == "done"


def test_prompt_that_preopens_thinking(pipe, tokenizer):
    cfg = ReasoningConfig(budget=3, open_delimiter="<reason>", close_delimiter="</reason>")
    st = pipe.new_state(SamplingParams(seed=2, max_tokens=30, reasoning=cfg), tokenizer.encode("Q?\n<reason>\n"))
    assert st.reasoning.phase == "thinking"
    drive(pipe, st, seed=2)
    assert "</reason>" in st.text
    assert pipe.stage_values(st)["gen.reasoning_budget"]["llmtrace.reasoning.forced_close"] is True


def test_zero_budget_closes_immediately(pipe, tokenizer):
    st = pipe.new_state(SamplingParams(seed=3, max_tokens=10, reasoning=ReasoningConfig(budget=0)),
                        tokenizer.encode("<think>"))
    drive(pipe, st, steps=3)
    assert st.text.startswith("</think>")


def test_constraint_applies_after_thinking(pipe, tokenizer):
    """With a reasoning config, a JSON constraint governs only what follows the close delimiter."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    cfg = ReasoningConfig(budget=6)
    st = pipe.new_state(SamplingParams(seed=4, max_tokens=80, reasoning=cfg, constraint=Constraint("json_schema", schema)),
                        tokenizer.encode("<think>"))
    drive(pipe, st, seed=4)
    thinking, _, answer = st.text.partition("</think>")
    assert thinking and answer
    assert set(json.loads(answer)) == {"n"}
