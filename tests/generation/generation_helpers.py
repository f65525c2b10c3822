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
    """Generation with the real model through the engine (paged KV cache): the pipeline state and deltas."""
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest

    engine = Engine.from_model(model, pipe.tokenizer, EngineConfig(num_blocks=64))
    states: list[SequenceState] = []
    new_state = engine.pipeline.new_state
    engine.pipeline.new_state = lambda *a, **k: states.append(new_state(*a, **k)) or states[-1]  # keep a handle
    engine.add_request(EngineRequest("r", list(prompt), params))
    deltas: list[str] = []
    while engine.has_unfinished():
        deltas += [o.text_delta for o in engine.step()]
    return states[0], deltas


def chat_prompt(tokenizer: Tokenizer, user: str, system: str | None = None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tokenizer.encode(tokenizer.apply_chat_template(messages))
