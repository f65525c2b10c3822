"""Fused RMSNorm (with an optional residual add) and fused rotary embedding, in Triton.

RMSNorm, Llama convention: ``y = x / sqrt(mean(x**2) + eps) * weight``, computed in fp32 and cast back
to ``x``'s dtype once at the end. (Hugging Face's LlamaRMSNorm casts the normalised value to the input
dtype *before* multiplying by the weight; in bf16 the two differ by at most one rounding.) With a
``residual``, the kernel first forms ``x + residual`` rounded to ``x``'s dtype — exactly what
``x + residual`` in torch gives — returns it as the new residual stream and normalises it.

Rotary embedding, for head vectors of size ``D`` and ``cos``/``sin`` tables of shape ``[positions,
D // 2]`` (``cos[p, i] = cos(p * base**(-2i/D))``), rotates pairs ``(x1, x2)`` into
``(x1*cos - x2*sin, x2*cos + x1*sin)``. Two pairings are in use:

- ``interleaved=False`` — "neox" / half-split, Hugging Face Llama's ``rotate_half``: pair ``i`` is
  ``(x[i], x[i + D/2])``.
- ``interleaved=True`` — GPT-J / Meta's original Llama / llama.cpp: pair ``i`` is
  ``(x[2i], x[2i+1])``.

GGUF files store Q/K projections permuted so that llama.cpp's interleaved rotary applies; a model that
un-permutes them uses the half-split form. No ``from __future__ import annotations`` in this file: Triton
reads the ``tl.constexpr`` annotations.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    out_ptr,
    x_ptr,
    res_ptr,
    res_out_ptr,
    w_ptr,
    eps,
    n_cols,
    stride_o,
    stride_x,
    stride_r,
    stride_ro,
    BLOCK: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
    xf = x.to(tl.float32)
    mean_sq = tl.sum(xf * xf, 0) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (xf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dimension; with ``residual`` returns ``(normed, x + residual)``."""
    n_cols = x.shape[-1]
    if weight.shape != (n_cols,):
        raise ValueError(f"weight shape {tuple(weight.shape)} does not match hidden size {n_cols}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual shape {tuple(residual.shape)} differs from x {tuple(x.shape)}")
    weight = weight.contiguous()  # the kernel reads it as a dense row
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty_like(x2)
    if residual is not None:
        r2 = residual.reshape(-1, n_cols)
        if r2.stride(-1) != 1:
            r2 = r2.contiguous()
        res_out = torch.empty_like(x2)
    else:
        r2 = res_out = x2  # placeholders: the kernel never touches them
    rows = x2.shape[0]
    if rows:
        block = triton.next_power_of_2(n_cols)
        _rms_norm_kernel[(rows,)](
            out,
            x2,
            r2,
            res_out,
            weight,
            eps,
            n_cols,
            out.stride(0),
            x2.stride(0),
            r2.stride(0),
            res_out.stride(0),
            BLOCK=block,
            HAS_RESIDUAL=residual is not None,
            num_warps=min(16, max(1, block // 256)),
        )
    if residual is None:
        return out.view(x.shape)
    return out.view(x.shape), res_out.view(x.shape)


@triton.jit
def _rotate_heads(
    out_ptr,
    in_ptr,
    tok,
    stride_t,
    stride_h,
    stride_ot,
    stride_oh,
    c,
    s,
    first,
    second,
    i_mask,
    NUM_HEADS: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
):
    """Rotate every head of token ``tok`` (the pairs ``first``/``second`` by ``cos``/``sin`` ``c``/``s``);
    the same code serves q and k. Each pair is read before it is written, so in place is safe."""
    offs_h = tl.arange(0, BLOCK_HEADS)
    mask = (offs_h < NUM_HEADS)[:, None] & i_mask[None, :]
    row = in_ptr + tok * stride_t + offs_h[:, None] * stride_h
    x1 = tl.load(row + first[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(row + second[None, :], mask=mask, other=0.0).to(tl.float32)
    out_row = out_ptr + tok * stride_ot + offs_h[:, None] * stride_oh
    ty = out_ptr.dtype.element_ty
    tl.store(out_row + first[None, :], (x1 * c[None, :] - x2 * s[None, :]).to(ty), mask=mask)
    tl.store(out_row + second[None, :], (x2 * c[None, :] + x1 * s[None, :]).to(ty), mask=mask)


@triton.jit
def _rotary_kernel(
    q_out_ptr,
    k_out_ptr,
    q_ptr,
    k_ptr,
    pos_ptr,
    cos_ptr,
    sin_ptr,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_qot,
    stride_qoh,
    stride_kot,
    stride_koh,
    stride_cos,
    NUM_Q_HEADS: tl.constexpr,
    NUM_K_HEADS: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_QH: tl.constexpr,
    BLOCK_KH: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    offs_i = tl.arange(0, BLOCK_HALF)
    i_mask = offs_i < HALF
    c = tl.load(cos_ptr + pos * stride_cos + offs_i, mask=i_mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * stride_cos + offs_i, mask=i_mask, other=0.0).to(tl.float32)
    if INTERLEAVED:
        first = offs_i * 2
        second = offs_i * 2 + 1
    else:
        first = offs_i
        second = offs_i + HALF

    _rotate_heads(out_ptr=q_out_ptr, in_ptr=q_ptr, tok=tok, stride_t=stride_qt, stride_h=stride_qh,
                  stride_ot=stride_qot, stride_oh=stride_qoh, c=c, s=s, first=first, second=second,
                  i_mask=i_mask, NUM_HEADS=NUM_Q_HEADS, BLOCK_HEADS=BLOCK_QH)
    _rotate_heads(out_ptr=k_out_ptr, in_ptr=k_ptr, tok=tok, stride_t=stride_kt, stride_h=stride_kh,
                  stride_ot=stride_kot, stride_oh=stride_koh, c=c, s=s, first=first, second=second,
                  i_mask=i_mask, NUM_HEADS=NUM_K_HEADS, BLOCK_HEADS=BLOCK_KH)


def rotary_cos_sin(
    max_positions: int,
    head_dim: int,
    base: float = 10000.0,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 ``cos``/``sin`` tables ``[max_positions, head_dim // 2]`` for plain (unscaled) RoPE.

    Models with a scaled rotary (Llama 3 style) build their own tables and pass them to
    :func:`rotary_embedding`; the kernel only reads the tables.
    """
    if head_dim % 2:
        raise ValueError(f"rotary needs an even head_dim, got {head_dim}")
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float().to(device), angles.sin().float().to(device)


def rotary_embedding(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    interleaved: bool = False,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q [tokens, heads, D]`` and ``k [tokens, kv_heads, D]`` by each token's position.

    ``interleaved`` picks the pairing (see the module docstring). With ``inplace`` the inputs are
    overwritten and returned; each program reads a pair before writing it, so that is safe.
    """
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must be [tokens, heads, head_dim]")
    head_dim = q.shape[2]
    half = head_dim // 2
    if head_dim % 2 or cos.shape[-1] != half or sin.shape != cos.shape:
        raise ValueError(f"cos/sin must be [positions, {half}] for head_dim {head_dim}")
    if positions.shape != (q.shape[0],):
        raise ValueError(f"positions must be [{q.shape[0]}], got {tuple(positions.shape)}")
    if q.stride(2) != 1 or k.stride(2) != 1 or cos.stride(1) != 1 or sin.stride(0) != cos.stride(0):
        raise ValueError("q, k and the cos/sin tables need a contiguous last dimension")
    q_out = q if inplace else torch.empty_like(q)
    k_out = k if inplace else torch.empty_like(k)
    if q.shape[0] == 0:
        return q_out, k_out
    _rotary_kernel[(q.shape[0],)](
        q_out,
        k_out,
        q,
        k,
        positions,
        cos,
        sin,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        q_out.stride(0),
        q_out.stride(1),
        k_out.stride(0),
        k_out.stride(1),
        cos.stride(0),
        NUM_Q_HEADS=q.shape[1],
        NUM_K_HEADS=k.shape[1],
        HALF=half,
        BLOCK_QH=triton.next_power_of_2(q.shape[1]),
        BLOCK_KH=triton.next_power_of_2(k.shape[1]),
        BLOCK_HALF=triton.next_power_of_2(half),
        INTERLEAVED=interleaved,
        num_warps=4,
    )
    return q_out, k_out
