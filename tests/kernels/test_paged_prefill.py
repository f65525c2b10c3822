"""The paged prefill/extend kernel and the TritonPagedAttention backend against dense references."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_reference import (  # noqa: F401 - interpreter_flag is an autouse fixture
    DEVICE,
    dense_attention,
    interpreter_flag,
    make_batch,
    need_triton,
    rel_err,
)

need_triton()

from llmtrace.backend.kernels import torch_reference  # noqa: E402
from llmtrace.backend.kernels.interface import write_kv  # noqa: E402
from llmtrace.backend.kernels.triton_attention import TritonPagedAttention  # noqa: E402
from llmtrace.backend.kernels.triton_prefill import paged_prefill_attention  # noqa: E402

F32_TOL = 2e-6
SMALL = {"split_size": 32, "decode_block_n": 16, "prefill_block_m": 16, "prefill_block_n": 16}


@settings(max_examples=10, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 50), st.integers(1, 40)), min_size=1, max_size=3),
    kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 3]),
    head_dim=st.sampled_from([8, 32]),
    page=st.sampled_from([1, 4, 16]),
    seed=st.integers(0, 2**16),
)
def test_prefill_matches_dense_reference(spans, kv_heads, group, head_dim, page, seed):
    """Each sequence: a cached prefix of random length plus a chunk of new tokens at the end."""
    batch = make_batch(
        [prefix + new for prefix, new in spans],
        [new for _, new in spans],
        num_heads=kv_heads * group,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        page=page,
        seed=seed,
    )
    scale = head_dim**-0.5
    out = paged_prefill_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens_t, batch.query_start_loc,
        scale, max_query_len=max(batch.query_lens), block_m=16, block_n=16,
    )
    assert rel_err(out, dense_attention(batch, scale)) < F32_TOL


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prefill_half_precision(dtype):
    batch = make_batch([40, 70], [40, 23], num_heads=6, num_kv_heads=2, head_dim=32, page=16, dtype=dtype)
    out = paged_prefill_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens_t, batch.query_start_loc,
        32**-0.5, max_query_len=40, block_m=16, block_n=16,
    )
    assert rel_err(out, dense_attention(batch, 32**-0.5)) < (2e-3 if dtype == torch.float16 else 2e-2)


@pytest.mark.parametrize("invariant", [False, True])
def test_backend_mixed_step_matches_dense_reference(invariant):
    """Decodes, a fresh prompt and a chunk over a cached prefix in one step, through ``forward``."""
    batch = make_batch([33, 18, 1, 61, 9], [1, 18, 1, 12, 1], num_heads=6, num_kv_heads=2, head_dim=16, page=4)
    backend = TritonPagedAttention(invariant=invariant, **SMALL)
    assert backend.name == "triton"
    out = backend.forward(batch.q, batch.k_cache, batch.v_cache, batch.metadata(), 0.25)
    assert rel_err(out, dense_attention(batch, 0.25)) < F32_TOL


def test_backend_without_host_lengths_reads_them_from_the_device():
    batch = make_batch([30, 12], [1, 5], num_heads=2, num_kv_heads=1, head_dim=16, page=8)
    meta = batch.metadata()
    bare = type(meta)(
        query_start_loc=meta.query_start_loc,
        seq_lens=meta.seq_lens,
        block_tables=meta.block_tables,
        slot_mapping=meta.slot_mapping,
        max_query_len=meta.max_query_len,
        max_seq_len=meta.max_seq_len,
    )
    out = TritonPagedAttention(**SMALL).forward(batch.q, batch.k_cache, batch.v_cache, bare, 0.25)
    assert rel_err(out, dense_attention(batch, 0.25)) < F32_TOL


def test_decode_rows_do_not_depend_on_what_shares_the_step():
    """Default mode: a decoding sequence alone and beside a prefill chunk gives the same bits."""
    mixed = make_batch([50, 40], [1, 25], num_heads=4, num_kv_heads=2, head_dim=16, page=4)
    backend = TritonPagedAttention(**SMALL)
    together = backend.forward(mixed.q, mixed.k_cache, mixed.v_cache, mixed.metadata(), 0.25)
    alone_batch = make_batch([50, 40], [1, 25], num_heads=4, num_kv_heads=2, head_dim=16, page=4)
    alone_batch.q, alone_batch.seq_lens, alone_batch.query_lens = mixed.q[:1], [50], [1]
    alone_batch.block_tables = mixed.block_tables[:1]
    alone = backend.forward(alone_batch.q, mixed.k_cache, mixed.v_cache, alone_batch.metadata(), 0.25)
    assert torch.equal(alone[0], together[0])


def test_invariant_mode_is_chunking_invariant():
    """Invariant mode: a prompt prefilled whole, in chunks, or token by token gives the same bits.

    On a GPU every chunking must match bitwise. Under the CPU interpreter ``tl.dot`` is numpy's BLAS,
    whose micro-kernels round a row differently depending on where it sits in the tile, so there
    only tile-aligned chunkings are bitwise and the others are held to float32 accuracy.
    """
    length = 40
    whole = make_batch([length], [length], num_heads=4, num_kv_heads=2, head_dim=16, page=4, seed=3)
    backend = TritonPagedAttention(invariant=True, **SMALL)
    reference = backend.forward(whole.q, whole.k_cache, whole.v_cache, whole.metadata(), 0.25)
    for chunk in (1, 7, 16, 32):
        pieces = []
        for start in range(0, length, chunk):
            end = min(start + chunk, length)
            step = make_batch([end], [end - start], num_heads=4, num_kv_heads=2, head_dim=16, page=4, seed=3)
            step.q, step.k_cache, step.v_cache = whole.q[start:end], whole.k_cache, whole.v_cache
            step.block_tables = whole.block_tables
            pieces.append(backend.forward(step.q, step.k_cache, step.v_cache, step.metadata(), 0.25))
        chunked = torch.cat(pieces)
        tokens_per_tile = SMALL["prefill_block_m"] // 2  # rows per tile / the GQA group of 2
        if DEVICE == "cuda" or chunk % tokens_per_tile == 0:
            assert torch.equal(chunked, reference), f"chunks of {chunk} changed the result"
        else:
            assert rel_err(chunked, reference) < F32_TOL


def test_matches_torch_reference_backend():
    """Same step through the engine's torch reference backend and through Triton."""
    batch = make_batch(
        [70, 21, 5, 40], [1, 21, 1, 9], num_heads=9, num_kv_heads=3, head_dim=32, page=16, fill=0.0
    )
    meta = batch.metadata()
    # Build the cache the engine's way: through write_kv, for this step's new tokens.
    k_new = batch.k_cache.view(-1, 3, 32)[meta.slot_mapping].clone()
    v_new = batch.v_cache.view(-1, 3, 32)[meta.slot_mapping].clone()
    k_cache, v_cache = batch.k_cache.clone(), batch.v_cache.clone()
    k_cache.view(-1, 3, 32)[meta.slot_mapping] = 0.0
    v_cache.view(-1, 3, 32)[meta.slot_mapping] = 0.0
    write_kv(k_new, v_new, k_cache, v_cache, meta.slot_mapping)
    scale = 32**-0.5
    ours = TritonPagedAttention(**SMALL).forward(batch.q, k_cache, v_cache, meta, scale)
    theirs = torch_reference.TorchPagedAttention().forward(batch.q, k_cache, v_cache, meta, scale)
    dense = dense_attention(batch, scale)
    assert rel_err(ours, dense) < F32_TOL
    assert rel_err(ours, theirs) < 1e-5


def test_rejects_inputs_it_cannot_run():
    batch = make_batch([8], [1], num_heads=4, num_kv_heads=2, head_dim=16, page=4)
    backend = TritonPagedAttention(**SMALL)
    with pytest.raises(ValueError, match="q must be"):
        backend.forward(batch.q[0], batch.k_cache, batch.v_cache, batch.metadata(), 0.25)
    with pytest.raises(ValueError, match="head_dim 16 vs cache 8"):
        backend.forward(batch.q, batch.k_cache[..., :8], batch.v_cache[..., :8], batch.metadata(), 0.25)
    with pytest.raises(ValueError, match="heads 3 vs kv 2"):
        backend.forward(batch.q[:, :3], batch.k_cache, batch.v_cache, batch.metadata(), 0.25)
    with pytest.raises(ValueError, match="multiple"):
        TritonPagedAttention(split_size=40, decode_block_n=16)
    if DEVICE == "cpu":
        with pytest.raises(ValueError, match="unsupported dtype"):
            backend.forward(
                batch.q.double(), batch.k_cache.double(), batch.v_cache.double(), batch.metadata(), 0.25
            )
