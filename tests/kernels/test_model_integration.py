"""TritonPagedAttention inside the real model forward (tiny random Llama), against the dense pass.

This is the engine's own calling convention — its KV cache, ``write_kv`` before attention, block
tables padded with 0 — so a layout or metadata mismatch between the engine and the kernels fails here.
"""

from __future__ import annotations

import random

import pytest
import torch
from kernel_reference import DEVICE, interpreter_flag, need_triton  # noqa: F401 - autouse fixture

need_triton()

from llmtrace.backend.engine import kv_cache as kv_module  # noqa: E402
from llmtrace.backend.kernels.interface import AttentionMetadata  # noqa: E402
from llmtrace.backend.kernels.triton_attention import TritonPagedAttention  # noqa: E402
from llmtrace.backend.model import llama as model_module  # noqa: E402

SMALL = {"split_size": 32, "decode_block_n": 16, "prefill_block_m": 16, "prefill_block_n": 16}
PAGE = 4


def run_step(model, kv, tables, done, work, attention):  # noqa: ANN001, ANN201
    """One forward pass computing ``n`` more tokens of each ``(seq_index, ids, n)``; their logits."""
    ids, pos, slots, seq_lens, qlens = [], [], [], [], []
    for i, tokens, n in work:
        start = done[i]
        ids += tokens[start : start + n]
        pos += range(start, start + n)
        slots += [tables[i][p // PAGE] * PAGE + p % PAGE for p in range(start, start + n)]
        seq_lens.append(start + n)
        qlens.append(n)
        done[i] += n
    width = max(len(tables[i]) for i, _, _ in work)
    starts = [0]
    for n in qlens:
        starts.append(starts[-1] + n)
    meta = AttentionMetadata(
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=DEVICE),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE),
        block_tables=torch.tensor(
            [tables[i] + [0] * (width - len(tables[i])) for i, _, _ in work], dtype=torch.int32, device=DEVICE
        ),
        slot_mapping=torch.tensor(slots, dtype=torch.long, device=DEVICE),
        max_query_len=max(qlens),
        max_seq_len=max(seq_lens),
        seq_lens_list=tuple(seq_lens),
        query_lens_list=tuple(qlens),
    )
    with torch.inference_mode():
        logits = model.forward(
            torch.tensor(ids, device=DEVICE), torch.tensor(pos, device=DEVICE), kv.layers, meta, attention,
            torch.arange(len(ids), device=DEVICE),
        )
    out, at = [], 0
    for _, _, n in work:
        out.append(logits[at : at + n])
        at += n
    return out


@pytest.mark.parametrize("invariant", [False, True])
def test_triton_backend_in_the_model_matches_the_dense_pass(invariant):
    model = model_module.LlamaModel.tiny("float32", seed=0)
    if DEVICE == "cuda":
        pytest.skip("the tiny model is built on CPU; the GPU path is covered by benchmarks/gpu_kernels.py")
    rng = random.Random(11)
    prompts = [[rng.randrange(3, 4000) for _ in range(n)] for n in (13, 22, 9)]
    free = list(range(1, 40))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-len(p) // PAGE))] for p in prompts]
    kv = kv_module.KVCache(model.config, 40, PAGE, torch.float32, DEVICE)
    attention = TritonPagedAttention(invariant=invariant, **SMALL)
    done = [0, 0, 0]
    logits = [[] for _ in prompts]
    # Step 1: a prefill chunk of 0 and all but the last token of 1. Step 2: 0's next chunk, 1's last
    # token (a decode), 2's whole prompt. Step 3: the rest of 0 (over its cached prefix).
    for work in (
        [(0, prompts[0], 5), (1, prompts[1], 21)],
        [(0, prompts[0], 4), (1, prompts[1], 1), (2, prompts[2], 9)],
        [(0, prompts[0], 4)],
    ):
        for (i, _, _), got in zip(work, run_step(model, kv, tables, done, work, attention), strict=True):
            logits[i].append(got)
    for i, prompt in enumerate(prompts):
        dense = model.forward_dense(prompt)
        paged = torch.cat(logits[i])
        diff = (paged - dense).abs().max().item()
        assert diff <= 2e-4, f"sequence {i}: max |paged - dense| = {diff:.2e}"
