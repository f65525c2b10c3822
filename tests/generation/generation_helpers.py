"""Helpers for the generation tests (drive a sequence with random logits or with the real model)."""

from __future__ import annotations

import time

import torch

from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.generation.pipeline import GenerationPipeline, SequenceState
from llmtrace.backend.model.tokenizer import Tokenizer


def run_random(pipe: GenerationPipeline, params: SamplingParams, prompt: list[int], *, seed: int = 0,
               scale: float = 3.0, steps: int = 400) -> SequenceState:
    """Drive a sequence with random logits (behaviour that does not depend on a model)."""
    st = pipe.new_state(params, prompt)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if st.finished:
            break
        logits = torch.randn(1, pipe.vocab_size, generator=g) * scale
        tok = pipe.sample(logits, [st])[0]
        pipe.accept(st, tok, time.time_ns())
    return st


def generate(model, pipe: GenerationPipeline, params: SamplingParams, prompt: list[int]) -> tuple[SequenceState, list[str]]:
    """Greedy/sampled generation with the real model's dense forward pass (no engine): state and deltas."""
    st = pipe.new_state(params, prompt)
    deltas: list[str] = []
    while not st.finished:
        logits = model.forward_dense(prompt + st.output_token_ids)[-1:]
        tok = pipe.sample(logits, [st])[0]
        res = pipe.accept(st, tok, time.time_ns())
        deltas.append(res.text_delta)
    return st, deltas


def chat_prompt(tokenizer: Tokenizer, user: str, system: str | None = None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tokenizer.encode(tokenizer.apply_chat_template(messages))
