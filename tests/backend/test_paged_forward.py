"""Float32 logits of the paged forward pass equal the dense reference (one plain pass, no cache)."""

from __future__ import annotations

import random

import pytest
import torch
from engine_helpers import random_prompt
from paged_helpers import PagedHarness

from llmtrace.backend.model.llama import LlamaModel

ATOL = 2e-4


def close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max |paged - dense| = {diff:.2e} > {atol:.0e}"


def test_single_prefill_matches_dense(tiny: LlamaModel) -> None:
    ids = random_prompt(random.Random(1), 37)
    h = PagedHarness(tiny)
    (logits,) = h.step([(h.new_sequence(ids), len(ids))])
    close(logits, tiny.forward_dense(ids))


@pytest.mark.parametrize("chunks", [[1] * 23, [5, 7, 11], [16, 7], [3, 20]])
def test_chunked_prefill_matches_dense(tiny: LlamaModel, chunks: list[int]) -> None:
    ids = random_prompt(random.Random(2), sum(chunks))
    h = PagedHarness(tiny, seed=3)
    seq = h.new_sequence(ids)
    got = torch.cat([h.step([(seq, n)])[0] for n in chunks])
    close(got, tiny.forward_dense(ids))


def test_prefix_hit_matches_dense(tiny: LlamaModel) -> None:
    """B reuses A's first three blocks as they are in the cache and computes only its own tail."""
    rng = random.Random(4)
    shared = random_prompt(rng, 12)
    a_ids = shared + random_prompt(rng, 9)
    b_ids = shared + random_prompt(rng, 6)
    h = PagedHarness(tiny, block_size=4)
    a = h.new_sequence(a_ids)
    h.step([(a, len(a_ids))])
    b = h.new_sequence(b_ids, shared_from=a, shared_blocks=3)
    (tail,) = h.step([(b, len(b_ids) - 12)])
    close(tail, tiny.forward_dense(b_ids)[12:])


def test_batched_mixed_step_matches_dense(tiny: LlamaModel) -> None:
    """One step holding two decodes and two prefill chunks of different lengths."""
    rng = random.Random(5)
    prompts = [random_prompt(rng, n) for n in (9, 30, 17, 25)]
    h = PagedHarness(tiny, num_blocks=128, seed=6)
    seqs = [h.new_sequence(p) for p in prompts]
    h.step([(seqs[0], 8), (seqs[1], 29)])  # both stop one short: their next step is a decode
    h.step([(seqs[2], 10)])
    out = h.step([(seqs[0], 1), (seqs[1], 1), (seqs[2], 7), (seqs[3], 25)])
    dense = [tiny.forward_dense(p) for p in prompts]
    close(out[0], dense[0][8:9])
    close(out[1], dense[1][29:30])
    close(out[2], dense[2][10:17])
    close(out[3], dense[3])


def test_batched_decode_matches_dense(tiny: LlamaModel) -> None:
    rng = random.Random(7)
    prompts = [random_prompt(rng, n) for n in (5, 18, 33, 2, 11)]
    h = PagedHarness(tiny, num_blocks=128)
    seqs = [h.new_sequence(p) for p in prompts]
    h.step([(s, len(p) - 1) for s, p in zip(seqs, prompts, strict=True) if len(p) > 1])
    for s in seqs:
        s.computed = len(s.token_ids) - 1
    out = h.step([(s, 1) for s in seqs])
    for got, p in zip(out, prompts, strict=True):
        close(got, tiny.forward_dense(p)[-1:])


@pytest.mark.slow
def test_real_model_paged_chunked_and_prefix_match_dense(real_f32: LlamaModel, tokenizer) -> None:  # noqa: ANN001
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name three rivers in Europe and say which is longest."}],
        add_generation_prompt=True,
    )
    ids = tokenizer.encode(text)
    dense = real_f32.forward_dense(ids)
    h = PagedHarness(real_f32, num_blocks=64, block_size=16, seed=8)
    a = h.new_sequence(ids)
    got = torch.cat([h.step([(a, n)])[0] for n in (20, len(ids) - 20)])
    close(got, dense, atol=2e-3)
    b = h.new_sequence(ids, shared_from=a, shared_blocks=2)  # a prefix hit of 32 tokens
    (tail,) = h.step([(b, len(ids) - 32)])
    close(tail, dense[32:], atol=2e-3)
    assert int(dense[-1].argmax()) == int(tail[-1].argmax())


def test_bfloat16_paged_forward_runs_close_to_float32(tokenizer) -> None:  # noqa: ANN001
    f32 = LlamaModel.tiny("float32", seed=0)
    bf16 = LlamaModel.tiny("bfloat16", seed=0)
    ids = random_prompt(random.Random(9), 20)
    h = PagedHarness(bf16)
    (logits,) = h.step([(h.new_sequence(ids), len(ids))])
    assert logits.dtype == torch.float32
    ref = f32.forward_dense(ids)
    rel = ((logits - ref).norm() / ref.norm()).item()
    assert rel < 0.05, rel
