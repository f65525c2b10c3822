"""Greedy output of the real model in float32 is the same as before the decode-path speedups (issue 22).

The reference tokens in ``data/greedy_reference.json`` were recorded from the engine before any of those
changes; a faster forward pass that changes what the model says fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import greedy, run_all, tokens_of

from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest

REFERENCE = json.loads((Path(__file__).parent / "data" / "greedy_reference.json").read_text())
CASES = REFERENCE["cases"]["float32"]


@pytest.fixture(scope="module")
def engine(real_f32, tokenizer) -> Engine:  # noqa: ANN001
    return Engine.from_model(real_f32, tokenizer, EngineConfig(dtype="float32", num_blocks=256, max_num_seqs=8))


def test_reference_prompts_tokenize_as_recorded(tokenizer) -> None:  # noqa: ANN001
    for case in CASES:
        assert tokenizer.encode(case["prompt"]) == case["prompt_ids"]


def test_greedy_tokens_unchanged_one_stream(engine: Engine) -> None:
    case = CASES[0]
    outs = run_all(engine, [EngineRequest("one", case["prompt_ids"], greedy(REFERENCE["max_tokens"]))])
    assert tokens_of(outs["one"]) == case["tokens"]


def test_greedy_tokens_unchanged_batched(engine: Engine) -> None:
    n = REFERENCE["max_tokens"]
    reqs = [EngineRequest(f"b{i}", c["prompt_ids"], greedy(n)) for i, c in enumerate(CASES)]
    outs = run_all(engine, reqs)
    for i, case in enumerate(CASES):
        assert tokens_of(outs[f"b{i}"]) == case["tokens"], f"prompt {i} ({case['prompt'][:30]!r}) changed"


def test_greedy_tokens_unchanged_without_stage_timing(real_f32, tokenizer) -> None:  # noqa: ANN001
    untimed = Engine.from_model(real_f32, tokenizer, EngineConfig(dtype="float32", num_blocks=128,
                                                                  stage_timing=False))
    case = CASES[2]
    outs = run_all(untimed, [EngineRequest("u", case["prompt_ids"], greedy(REFERENCE["max_tokens"]))])
    assert tokens_of(outs["u"]) == case["tokens"]


def test_bfloat16_lm_head_runs_on_the_exact_q8_codes(real_bf16) -> None:  # noqa: ANN001
    """The bfloat16 decode path's LM head runs on the GGUF's exact Q8_0 codes (split in two int4 halves): same
    top token as a float32 matmul over the exact dequantized weights, no further from it than the dense
    bfloat16 head, at 1 row and at 16."""
    import torch

    bf16 = real_bf16  # the session's copy (tests/backend/conftest.py): loaded once, read only
    assert bf16.lm_head.kernel.endswith("q8_as_2xint4+dense")
    q8 = bf16.weights.lm_head_q8  # bfloat16 holds Q8_0 values to 8 bits: compare with the codes themselves
    assert q8 is not None
    exact = torch.from_numpy(q8.codes).float().view(q8.codes.shape[0], -1, 32) * torch.from_numpy(q8.scale)[..., None]
    exact = exact.view(bf16.weights.lm_head.shape)
    for rows in (1, 16):
        x = torch.randn(rows, bf16.config.hidden_size, generator=torch.Generator().manual_seed(rows)).bfloat16()
        with torch.inference_mode():
            got = bf16.lm_head(x).float()
            dense = torch.nn.functional.linear(x, bf16.weights.lm_head).float()
        want = x.float() @ exact.T
        assert got.shape == want.shape
        assert torch.equal(got.argmax(dim=1), want.argmax(dim=1))
        assert (got - want).abs().max().item() <= 1.5 * (dense - want).abs().max().item() + 1e-3
