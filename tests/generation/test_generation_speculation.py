"""Speculation: n-gram and self drafts, acceptance, and output identical with and without speculation."""

from __future__ import annotations

import time

import pytest
import torch

from llmtrace.backend.generation.params import Constraint, SamplingParams
from llmtrace.backend.generation.speculation import NgramDrafter, SelfDrafter, accept_drafts


def test_ngram_prompt_lookup():
    d = NgramDrafter(ngram_max=3)
    seq = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]
    assert d.propose(seq, 3) == [8, 9, 1]  # the trigram 5 6 7 occurred before, followed by 8 9 1
    assert d.propose(seq, 10) == [8, 9, 1, 2, 5, 6, 7]
    assert d.propose([1, 2, 3], 4) == []  # nothing repeats
    assert d.propose([4, 1, 9, 4], 2) == [1, 9]  # falls back to a shorter n-gram
    assert d.propose([4, 4, 4, 4], 3) == [4]  # latest occurrence wins
    with pytest.raises(ValueError):
        NgramDrafter(ngram_max=0)


def test_accept_drafts():
    assert accept_drafts([1, 2, 3], [1, 2, 3, 4]) == 3
    assert accept_drafts([1, 2, 3], [1, 9, 3, 4]) == 1
    assert accept_drafts([1, 2, 3], [7]) == 0
    assert accept_drafts([], [7]) == 0


def test_self_drafter_is_greedy_over_the_draft_model():
    table = torch.randn(50, 50, generator=torch.Generator().manual_seed(0))
    d = SelfDrafter(lambda ids: table[ids[-1]])
    draft = d.propose([3], 4)
    expect, last = [], 3
    for _ in range(4):
        last = int(table[last].argmax())
        expect.append(last)
    assert draft == expect


class ToyLM:
    """A deterministic 'model': logits depend only on the last token (mod a few rows), so greedy text falls
    into a short loop that prompt lookup can predict."""

    def __init__(self, vocab: int, rows: int = 5, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(rows, vocab, generator=g) * 4
        self.rows = rows

    def __call__(self, ids: list[int]) -> torch.Tensor:
        return self.table[ids[-1] % self.rows]


def plain(pipe, lm, params, prompt):
    st = pipe.new_state(params, prompt)
    while not st.finished:
        tok = pipe.sample(lm(prompt + st.output_token_ids)[None], [st])[0]
        pipe.accept(st, tok, time.time_ns())
    return st


def speculative(pipe, lm_rows, params, prompt, drafter, k=4):
    """What the engine does: draft k, score all k+1 positions in one pass, keep the agreeing prefix + 1."""
    st = pipe.new_state(params, prompt)
    drafted = accepted = 0
    while not st.finished:
        seq = prompt + st.output_token_ids
        draft = drafter.propose(seq, k)
        logits = lm_rows(seq, draft)  # [len(draft) + 1, V]
        targets = pipe.sample_draft_targets(st, logits, draft)
        n = accept_drafts(draft, targets)
        assert targets[:n] == draft[:n] and len(targets) == n + 1 or len(targets) == len(draft) + 1
        drafted += len(draft)
        accepted += n
        for tok in targets:
            if pipe.accept(st, tok, time.time_ns()).finished:
                break
    return st, drafted, accepted


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0, max_tokens=60),
        SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_tokens=60),
        SamplingParams(temperature=0.0, max_tokens=60, frequency_penalty=0.3, repetition_penalty=1.1),
        SamplingParams(temperature=0.7, seed=3, max_tokens=60,
                       constraint=Constraint("regex", "[a-z ]{10,200}")),
    ],
    ids=["greedy", "seeded-sampled", "penalties", "constrained"],
)
def test_speculation_changes_nothing_but_speed(pipe, params):
    lm = ToyLM(pipe.vocab_size)
    prompt = [101, 202, 303, 404]

    def rows(seq, draft):
        full = seq + draft
        return torch.stack([lm(full[: len(seq) + i]) for i in range(len(draft) + 1)])

    base = plain(pipe, lm, params, prompt)
    spec, drafted, accepted = speculative(pipe, rows, params, prompt, NgramDrafter(3))
    assert spec.output_token_ids == base.output_token_ids
    assert spec.text == base.text and spec.finish_reason == base.finish_reason
    if params.greedy and params.constraint is None and not params.frequency_penalty:
        assert accepted > 0.5 * drafted > 0  # the toy model loops, so prompt lookup is mostly right


@pytest.mark.slow
def test_real_model_greedy_identical_with_speculation_in_the_engine(model, tokenizer):
    """Through the engine: n-gram and self-draft speculation verified in one pass, same greedy tokens."""
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.generation.params import SpeculationConfig

    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content":
        "Repeat: the cat sat on the mat, the cat sat on the mat."}]))

    def run(spec):
        engine = Engine.from_model(model, tokenizer, EngineConfig(num_blocks=64))
        engine.add_request(EngineRequest("r", prompt, SamplingParams(temperature=0.0, max_tokens=20, speculation=spec)))
        ids = []
        while engine.has_unfinished():
            for out in engine.step():
                ids += out.new_token_ids
        return ids, engine.last_step

    base, _ = run(SpeculationConfig())
    ngram, _ = run(SpeculationConfig(method="ngram", k=4))
    assert ngram == base
    self_draft, _ = run(SpeculationConfig(method="self_draft", k=2, draft_layers=8))
    assert self_draft == base
    assert "cat" in tokenizer.decode(base)


def test_seeded_sampling_identical_with_speculation_in_the_engine(tokenizer):
    """Sampling draws position n from a (seed, n) stream, so speculation changes no sampled token either."""
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.generation.params import SpeculationConfig
    from llmtrace.backend.model.llama import LlamaModel

    model = LlamaModel.tiny("float32", seed=0)
    prompt = tokenizer.encode("a b c d a b c d a b c d a b c")

    def run(spec):
        engine = Engine.from_model(model, tokenizer, EngineConfig(num_blocks=64, batch_invariant=True))
        engine.add_request(EngineRequest("r", prompt, SamplingParams(temperature=0.7, seed=5, max_tokens=30,
                                                                     ignore_eos=True, speculation=spec)))
        ids = []
        while engine.has_unfinished():
            for out in engine.step():
                ids += out.new_token_ids
        return ids

    base = run(SpeculationConfig())
    assert run(SpeculationConfig(method="ngram", k=3)) == base
    assert run(SpeculationConfig(method="self_draft", k=2, draft_layers=1)) == base
