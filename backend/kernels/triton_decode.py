"""Triton paged-attention decode: one query token per sequence, K/V read in place from the block table.

The work of one sequence is cut into splits of a *fixed* number of KV positions (``split_size``).
Stage 1 runs one program per (sequence, KV head, split): it loads the query heads that share that KV
head (GQA), walks the split tile by tile, gathering each token's K/V row through the block table, and
keeps an fp32 online softmax. It writes the split's normalised output and its log-sum-exp. Stage 2
runs one program per (sequence, query head) and folds the splits in ascending order.

Why this is batch invariant: the split boundaries depend only on the sequence's own length, every
program's tile loop and block sizes are compile-time constants that no batch property selects, and the
fold runs sequentially in a fixed order. A sequence therefore goes through exactly the same arithmetic
whether it is alone or in a batch of 64 — its output is bitwise the same.

This file must not be imported with ``from __future__ import annotations``: Triton reads the
``tl.constexpr`` annotations of the kernels as objects.
"""

import torch
import triton
import triton.language as tl

from llmtrace.backend.kernels.interface import paged_shapes

DEFAULT_SPLIT_SIZE = 256  # KV positions per split; fixed so the partition never depends on the batch
LOG2E = 1.4426950408889634  # kernels use exp2: scores are scaled by log2(e) once on the host


@triton.jit
def program_sequence(seq_ids_ptr, pid, HAS_SEQ_IDS: tl.constexpr):
    """The sequence a program serves: ``seq_ids[pid]`` when a subset was asked for, else ``pid``."""
    if HAS_SEQ_IDS:
        return tl.load(seq_ids_ptr + pid)
    return pid


@triton.jit
def attend_kv_tile(
    q,
    m_i,
    l_i,
    acc,
    k_ptr,
    v_ptr,
    bt_row,
    pos,
    n_mask,
    visible,
    kv_head,
    offs_d,
    d_mask,
    qk_scale,
    stride_kb,
    stride_ko,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vo,
    stride_vh,
    stride_vd,
    PAGE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """One KV tile of the online softmax, shared by the decode and the prefill kernel (inlined by Triton).

    Gathers the K/V rows of positions ``pos`` (valid where ``n_mask``) of KV head ``kv_head`` through the
    sequence's block-table row ``bt_row``, scores them against the query rows ``q``, keeps the scores
    where ``visible`` (broadcast to ``[rows, BLOCK_N]``) and folds the tile into the running max
    ``m_i``, sum ``l_i`` and fp32 ``acc`` (base-2 exponentials: ``qk_scale`` includes log2(e)).
    Returns the updated ``(m_i, l_i, acc)``.
    """
    block = tl.load(bt_row + pos // PAGE, mask=n_mask, other=0).to(tl.int64)
    offset = pos % PAGE
    kv_mask = n_mask[:, None] & d_mask[None, :]
    k = tl.load(
        k_ptr
        + (block * stride_kb + offset * stride_ko + kv_head * stride_kh)[:, None]
        + offs_d[None, :] * stride_kd,
        mask=kv_mask,
        other=0.0,
    )
    if WIDEN:
        k = k.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(
        v_ptr
        + (block * stride_vb + offset * stride_vo + kv_head * stride_vh)[:, None]
        + offs_d[None, :] * stride_vd,
        mask=kv_mask,
        other=0.0,
    )
    if WIDEN:
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    query_start_loc_ptr,
    seq_ids_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_ko,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vo,
    stride_vh,
    stride_vd,
    stride_bt,
    stride_po_s,
    stride_po_h,
    stride_po_p,
    stride_pl_s,
    stride_pl_h,
    HEAD_DIM: tl.constexpr,
    GROUP: tl.constexpr,
    PAGE: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_SEQ_IDS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    pid_s = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq = program_sequence(seq_ids_ptr, pid_s, HAS_SEQ_IDS)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = split * SPLIT
    if start >= seq_len:
        return
    end = tl.minimum(start + SPLIT, seq_len)
    # The decode token is the last (only) query token of the sequence.
    row = (tl.load(query_start_loc_ptr + seq + 1) - 1).to(tl.int64)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    h_mask = offs_h < GROUP
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * GROUP + offs_h
    q = tl.load(
        q_ptr + row * stride_qt + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
        mask=h_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(k_ptr.dtype.element_ty)
    if WIDEN:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        n_mask = pos < end
        m_i, l_i, acc = attend_kv_tile(
            q, m_i, l_i, acc, k_ptr, v_ptr, bt_row, pos, n_mask, n_mask[None, :], kv_head, offs_d, d_mask,
            qk_scale, stride_kb, stride_ko, stride_kh, stride_kd, stride_vb, stride_vo, stride_vh, stride_vd,
            PAGE, DOT_PRECISION, WIDEN,
        )

    out = acc / l_i[:, None]
    lse = m_i + tl.log2(l_i)
    part = pid_s.to(tl.int64)
    tl.store(
        part_out_ptr
        + part * stride_po_s
        + heads[:, None] * stride_po_h
        + split * stride_po_p
        + offs_d[None, :],
        out,
        mask=h_mask[:, None] & d_mask[None, :],
    )
    tl.store(part_lse_ptr + part * stride_pl_s + heads * stride_pl_h + split, lse, mask=h_mask)


@triton.jit
def _decode_reduce_kernel(
    out_ptr,
    part_out_ptr,
    part_lse_ptr,
    seq_lens_ptr,
    query_start_loc_ptr,
    seq_ids_ptr,
    stride_ot,
    stride_oh,
    stride_od,
    stride_po_s,
    stride_po_h,
    stride_po_p,
    stride_pl_s,
    stride_pl_h,
    HEAD_DIM: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_SEQ_IDS: tl.constexpr,
):
    pid_s = tl.program_id(0)
    head = tl.program_id(1)
    seq = program_sequence(seq_ids_ptr, pid_s, HAS_SEQ_IDS)
    seq_len = tl.load(seq_lens_ptr + seq)
    n_splits = tl.cdiv(seq_len, SPLIT)
    row = (tl.load(query_start_loc_ptr + seq + 1) - 1).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    part = pid_s.to(tl.int64)
    lse_base = part_lse_ptr + part * stride_pl_s + head * stride_pl_h
    out_base = part_out_ptr + part * stride_po_s + head * stride_po_h + offs_d

    # Fold the splits in ascending order; split 0 always exists because seq_len >= 1.
    m = tl.load(lse_base)
    acc = tl.load(out_base, mask=d_mask, other=0.0)
    denom = m - m + 1.0
    for split in range(1, n_splits):
        lse = tl.load(lse_base + split)
        o = tl.load(out_base + split * stride_po_p, mask=d_mask, other=0.0)
        m_new = tl.maximum(m, lse)
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(lse - m_new)
        acc = acc * alpha + o * w
        denom = denom * alpha + w
        m = m_new
    result = acc / denom
    tl.store(
        out_ptr + row * stride_ot + head * stride_oh + offs_d * stride_od,
        result.to(out_ptr.dtype.element_ty),
        mask=d_mask,
    )


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 operands use exact ("ieee") products; TF32 would cost ~1e-3 relative error."""
    return "ieee" if dtype == torch.float32 or widen_dot(dtype) else "tf32"


def widen_dot(dtype: torch.dtype) -> bool:
    """Whether to widen bf16 operands to fp32 before ``tl.dot``.

    Only under Triton's CPU interpreter, whose bf16 ``tl.dot`` returns garbage (triton 3.9: it
    multiplies the raw bit patterns; fp16 is fine); on a GPU the tensor cores take bf16 directly.
    """
    return dtype == torch.bfloat16 and bool(triton.knobs.runtime.interpret)


def decode_config(dtype: torch.dtype, head_dim: int) -> tuple[int, int]:
    """Default ``(block_n, num_warps)`` for a cache dtype and head size — never for a batch.

    Sized from sm_90 register counts (compiled ahead of time without a GPU): a 64-token bf16 tile at
    head size 128 takes ~90 registers with 4 warps; fp32 tiles of that size spill, so they get half the
    tokens and twice the warps.
    """
    wide = head_block(head_dim) > 128
    if dtype == torch.float32:
        return (16, 8) if wide else (32, 8)
    return (32, 8) if wide else (64, 4)


def head_block(head_dim: int) -> int:
    """Padded head dimension: a power of two, at least 16 (the smallest ``tl.dot`` operand)."""
    return max(16, triton.next_power_of_2(head_dim))


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    max_seq_len: int,
    query_start_loc: torch.Tensor | None = None,
    seq_ids: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    split_size: int = DEFAULT_SPLIT_SIZE,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Decode attention for one query token per sequence over a paged cache.

    ``q`` is ``[num_tokens, num_heads, head_dim]``; caches are ``[num_blocks, page, num_kv_heads,
    head_dim]``. Sequence ``s`` (``seq_ids[i]`` for program ``i``, or ``i`` itself when ``seq_ids`` is
    None) reads its query at row ``query_start_loc[s + 1] - 1`` (row ``s`` when ``query_start_loc`` is
    None) and writes the output at the same row of ``out``. ``max_seq_len`` bounds ``seq_lens`` (passed
    from the host so no device sync is needed to size the grid). ``block_n``/``num_warps`` default to
    :func:`decode_config`.
    """
    num_heads, head_dim, num_kv_heads, page = paged_shapes(q, k_cache, v_cache)
    auto_n, auto_warps = decode_config(k_cache.dtype, head_dim)
    block_n = block_n or auto_n
    num_warps = num_warps or auto_warps
    if split_size % block_n or block_n < 16 or block_n & (block_n - 1):
        raise ValueError("block_n must be a power of two >= 16 that divides split_size")
    n_seqs = int(seq_ids.shape[0]) if seq_ids is not None else int(seq_lens.shape[0])
    if out is None:
        out = torch.empty_like(q)
    if query_start_loc is None:
        query_start_loc = torch.arange(n_seqs + 1, device=q.device, dtype=torch.int32)
    if n_seqs == 0 or max_seq_len <= 0:
        return out
    group = num_heads // num_kv_heads
    max_splits = triton.cdiv(max_seq_len, split_size)
    part_out = torch.empty((n_seqs, num_heads, max_splits, head_dim), device=q.device, dtype=torch.float32)
    part_lse = torch.empty((n_seqs, num_heads, max_splits), device=q.device, dtype=torch.float32)
    ids = seq_ids if seq_ids is not None else seq_lens  # placeholder pointer when unused
    block_d = head_block(head_dim)
    extra = {} if num_stages is None else {"num_stages": num_stages}
    _decode_split_kernel[(n_seqs, num_kv_heads, max_splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        ids,
        part_out,
        part_lse,
        scale * LOG2E,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        block_tables.stride(0),
        *part_out.stride()[:3],
        *part_lse.stride()[:2],
        HEAD_DIM=head_dim,
        GROUP=group,
        PAGE=page,
        SPLIT=split_size,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        HAS_SEQ_IDS=seq_ids is not None,
        DOT_PRECISION=dot_precision(k_cache.dtype),
        WIDEN=widen_dot(k_cache.dtype),
        num_warps=num_warps,
        **extra,
    )
    _decode_reduce_kernel[(n_seqs, num_heads)](
        out,
        part_out,
        part_lse,
        seq_lens,
        query_start_loc,
        ids,
        *out.stride(),
        *part_out.stride()[:3],
        *part_lse.stride()[:2],
        HEAD_DIM=head_dim,
        SPLIT=split_size,
        BLOCK_D=block_d,
        HAS_SEQ_IDS=seq_ids is not None,
        num_warps=1 if block_d <= 64 else 2,
    )
    return out
