"""Triton paged prefill/extend attention: several query tokens per sequence over a cached prefix.

Chunked prefill and prefix-cache hits both look like this: a sequence of ``seq_len`` positions whose
last ``q_len`` tokens are new (their K/V were already written into the cache) and whose first
``seq_len - q_len`` are a cached prefix. Query token ``j`` sits at position ``seq_len - q_len + j`` and
attends causally to positions ``0..that`` — prefix and new tokens alike, all read in place through the
block table.

One program handles one KV head of one sequence and ``BLOCK_M`` query rows: ``BLOCK_M / G`` tokens
times the ``G`` query heads that share that KV head (GQA; ``G`` rounded up to a power of two), so each
K/V tile is read once for the whole group. It stops walking KV tiles after the last position its tokens
may see, and masks the causal diagonal inside the last tiles.
Softmax is online, accumulated in fp32. The result of a sequence depends only on its own tokens and the
fixed block sizes, never on the rest of the batch.

No ``from __future__ import annotations`` here: Triton reads the ``tl.constexpr`` annotations.
"""

import torch
import triton
import triton.language as tl

from llmtrace.backend.kernels.interface import paged_shapes
from llmtrace.backend.kernels.triton_decode import (
    LOG2E,
    attend_kv_tile,
    dot_precision,
    head_block,
    program_sequence,
    widen_dot,
)


@triton.jit
def _prefill_kernel(
    out_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    query_start_loc_ptr,
    seq_ids_ptr,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_ot,
    stride_oh,
    stride_od,
    stride_kb,
    stride_ko,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vo,
    stride_vh,
    stride_vd,
    stride_bt,
    HEAD_DIM: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_P2: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_SEQ_IDS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    # One program: TOKENS query tokens x the GROUP query heads of one KV head, as BLOCK_M rows
    # (row r = token r // GROUP_P2, head r % GROUP_P2), so each K/V tile is loaded once per KV head.
    TOKENS: tl.constexpr = BLOCK_M // GROUP_P2
    pid_s = tl.program_id(0)
    m_block = tl.program_id(1)
    kv_head = tl.program_id(2)
    seq = program_sequence(seq_ids_ptr, pid_s, HAS_SEQ_IDS)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    t0 = m_block * TOKENS
    if t0 >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix = seq_len - q_len

    offs_r = tl.arange(0, BLOCK_M)
    token = t0 + offs_r // GROUP_P2
    head = kv_head * GROUP + offs_r % GROUP_P2
    r_mask = (token < q_len) & (offs_r % GROUP_P2 < GROUP)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_mask = offs_d < HEAD_DIM
    rows = (q_start + token).to(tl.int64)
    q = tl.load(
        q_ptr + (rows * stride_qt + head * stride_qh)[:, None] + offs_d[None, :] * stride_qd,
        mask=r_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(k_ptr.dtype.element_ty)
    if WIDEN:
        q = q.to(tl.float32)
    q_pos = prefix + token

    # Padding rows still see position 0, so no row's running max stays -inf (no NaN to mask later).
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_end = tl.minimum(seq_len, prefix + t0 + TOKENS)
    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for n0 in range(0, kv_end, BLOCK_N):
        pos = n0 + offs_n
        n_mask = pos < kv_end
        visible = n_mask[None, :] & (pos[None, :] <= q_pos[:, None])  # causal, per query row
        m_i, l_i, acc = attend_kv_tile(
            q, m_i, l_i, acc, k_ptr, v_ptr, bt_row, pos, n_mask, visible, kv_head, offs_d, d_mask,
            qk_scale, stride_kb, stride_ko, stride_kh, stride_kd, stride_vb, stride_vo, stride_vh, stride_vd,
            PAGE, DOT_PRECISION, WIDEN,
        )

    out = acc / l_i[:, None]
    tl.store(
        out_ptr + (rows * stride_ot + head * stride_oh)[:, None] + offs_d[None, :] * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=r_mask[:, None] & d_mask[None, :],
    )


def prefill_config(dtype: torch.dtype, head_dim: int) -> tuple[int, int, int]:
    """Default ``(block_m, block_n, num_warps)`` for a cache dtype and head size (sm_90 register counts:
    64x64 bf16 tiles at head size 128 fit in ~185 registers with 4 warps; fp32 needs smaller tiles).

    ``block_m`` counts query *rows* (tokens x padded GQA group), not tokens."""
    wide = head_block(head_dim) > 128
    if dtype == torch.float32:
        return (32, 16, 8) if wide else (32, 32, 8)
    return (64, 32, 8) if wide else (64, 64, 4)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    *,
    max_query_len: int,
    seq_ids: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its whole paged KV (prefix + new).

    Shapes follow :mod:`llmtrace.backend.kernels.interface`. Program row ``i`` handles sequence
    ``seq_ids[i]`` (or ``i`` when ``seq_ids`` is None); ``max_query_len`` bounds the query lengths of
    those sequences and comes from the host so sizing the grid needs no device sync. Block sizes and
    warps default to :func:`prefill_config`.
    """
    num_heads, head_dim, num_kv_heads, page = paged_shapes(q, k_cache, v_cache)
    auto_m, auto_n, auto_warps = prefill_config(k_cache.dtype, head_dim)
    block_m, block_n, num_warps = block_m or auto_m, block_n or auto_n, num_warps or auto_warps
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {size}")
    n_seqs = int(seq_ids.shape[0]) if seq_ids is not None else int(seq_lens.shape[0])
    if out is None:
        out = torch.empty_like(q)
    if n_seqs == 0 or max_query_len <= 0:
        return out
    extra = {} if num_stages is None else {"num_stages": num_stages}
    group = num_heads // num_kv_heads
    group_p2 = triton.next_power_of_2(group)
    block_m = max(block_m, group_p2)  # at least one token per tile
    grid = (n_seqs, triton.cdiv(max_query_len, block_m // group_p2), num_kv_heads)
    _prefill_kernel[grid](
        out,
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        seq_ids if seq_ids is not None else seq_lens,
        scale * LOG2E,
        *q.stride(),
        *out.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        block_tables.stride(0),
        HEAD_DIM=head_dim,
        GROUP=group,
        GROUP_P2=group_p2,
        PAGE=page,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=head_block(head_dim),
        HAS_SEQ_IDS=seq_ids is not None,
        DOT_PRECISION=dot_precision(k_cache.dtype),
        WIDEN=widen_dot(k_cache.dtype),
        num_warps=num_warps,
        **extra,
    )
    return out
