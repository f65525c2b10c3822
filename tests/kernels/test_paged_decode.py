"""The split-K paged decode kernel against a dense float64 reference, and its batch invariance."""

from __future__ import annotations

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

from llmtrace.backend.kernels.triton_decode import paged_decode_attention  # noqa: E402

TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def run_decode(batch, scale, *, split_size=32, block_n=16, seq_ids=None, max_seq_len=None):
    if max_seq_len is None:
        max_seq_len = max(batch.seq_lens)
    return paged_decode_attention(
        batch.q,
        batch.k_cache,
        batch.v_cache,
        batch.block_tables,
        batch.seq_lens_t,
        scale,
        max_seq_len=max_seq_len,
        query_start_loc=batch.query_start_loc,
        seq_ids=seq_ids,
        split_size=split_size,
        block_n=block_n,
    )


@settings(max_examples=12, deadline=None)
@given(
    seq_lens=st.lists(st.integers(1, 90), min_size=1, max_size=4),
    kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 2, 3]),
    head_dim=st.sampled_from([8, 24, 32]),
    page=st.sampled_from([1, 4, 8, 16]),
    split_size=st.sampled_from([16, 32, 64]),
    seed=st.integers(0, 2**16),
)
def test_decode_matches_dense_reference(seq_lens, kv_heads, group, head_dim, page, split_size, seed):
    batch = make_batch(
        seq_lens,
        [1] * len(seq_lens),
        num_heads=kv_heads * group,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        page=page,
        device=DEVICE,
        seed=seed,
    )
    scale = head_dim**-0.5
    out = run_decode(batch, scale, split_size=split_size)
    assert rel_err(out, dense_attention(batch, scale)) < TOL[torch.float32]


def test_decode_half_precision():
    for dtype in (torch.float16, torch.bfloat16):
        batch = make_batch(
            [7, 64, 130], [1, 1, 1], num_heads=6, num_kv_heads=2, head_dim=32, page=16, dtype=dtype
        )
        out = run_decode(batch, 32**-0.5, split_size=64)
        assert out.dtype == dtype
        assert rel_err(out, dense_attention(batch, 32**-0.5)) < TOL[dtype]


def test_decode_reads_query_rows_through_query_start_loc():
    """Rows of q need not be one per sequence in order: each reads the last token of its own span."""
    batch = make_batch([20, 45, 33], [1, 1, 1], num_heads=4, num_kv_heads=2, head_dim=16, page=4)
    ids = torch.tensor([2, 0], dtype=torch.int32)
    out = torch.zeros_like(batch.q)
    out = paged_decode_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens_t, 0.25,
        max_seq_len=45, query_start_loc=batch.query_start_loc, seq_ids=ids, out=out, split_size=16, block_n=16,
    )
    ref = dense_attention(batch, 0.25)
    assert rel_err(out[[0, 2]], ref[[0, 2]]) < TOL[torch.float32]
    assert torch.count_nonzero(out[1]) == 0  # sequence 1 was not asked for and stays untouched


def test_decode_is_batch_invariant():
    """A sequence alone and the same sequence inside a larger, longer batch: bitwise the same output."""
    lens = [77, 5, 200, 33, 128]
    batch = make_batch(lens, [1] * len(lens), num_heads=6, num_kv_heads=2, head_dim=32, page=8)
    scale = 32**-0.5
    together = run_decode(batch, scale, split_size=32)
    for i in range(len(lens)):
        ids = torch.tensor([i], dtype=torch.int32)
        alone = run_decode(batch, scale, split_size=32, seq_ids=ids, max_seq_len=lens[i])
        assert torch.equal(alone[i], together[i]), f"sequence {i} changed with batch composition"
    # Another order, another grid size (a larger max_seq_len bound): still the same bits.
    ids = torch.tensor([4, 2, 0], dtype=torch.int32)
    reordered = run_decode(batch, scale, split_size=32, seq_ids=ids, max_seq_len=1000)
    for i in (0, 2, 4):
        assert torch.equal(reordered[i], together[i])
