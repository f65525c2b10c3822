"""Fused RMSNorm and rotary embedding against plain torch written out here."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_reference import (  # noqa: F401 - interpreter_flag is an autouse fixture
    DEVICE,
    interpreter_flag,
    need_triton,
    rel_err,
)

need_triton()

from llmtrace.backend.kernels.triton_norm_rotary import (  # noqa: E402
    rms_norm,
    rotary_cos_sin,
    rotary_embedding,
)


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.double()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def torch_rotary_neox(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Hugging Face Llama: ``x * cos + rotate_half(x) * sin`` with the angle table repeated twice."""
    dim = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]
    return x.double() * emb.cos() + rotate_half(x.double()) * emb.sin()


def torch_rotary_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Meta's original Llama: adjacent pairs as complex numbers times ``exp(i * angle)``."""
    dim = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = positions.double()[:, None] * inv_freq[None, :]
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], dim // 2, 2).contiguous())
    rotated = pairs * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    return torch.view_as_real(rotated).reshape(x.shape)


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 6), hidden=st.sampled_from([8, 48, 100, 256]), seed=st.integers(0, 2**16))
def test_rms_norm_matches_torch(rows, hidden, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, hidden, generator=gen) * 3).to(DEVICE)
    w = torch.randn(hidden, generator=gen).to(DEVICE)
    out = rms_norm(x, w, 1e-5)
    assert out.shape == x.shape
    assert rel_err(out, torch_rms_norm(x, w, 1e-5)) < 1e-6


def test_rms_norm_with_residual_and_leading_dims():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 64, generator=gen).to(DEVICE)
    res = torch.randn(2, 3, 64, generator=gen).to(DEVICE)
    w = torch.randn(64, generator=gen).to(DEVICE)
    out, new_res = rms_norm(x, w, 1e-6, residual=res)
    assert torch.equal(new_res, x + res)
    assert rel_err(out, torch_rms_norm(x + res, w, 1e-6)) < 1e-6


def test_rms_norm_bf16_matches_hugging_face_within_a_rounding():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 128, generator=gen).bfloat16().to(DEVICE)
    res = torch.randn(4, 128, generator=gen).bfloat16().to(DEVICE)
    w = (1 + 0.1 * torch.randn(128, generator=gen)).bfloat16().to(DEVICE)
    out, new_res = rms_norm(x, w, 1e-5, residual=res)
    assert out.dtype == torch.bfloat16
    if DEVICE == "cuda":
        assert torch.equal(new_res, x + res)  # the residual stream rounds exactly as torch's add
    else:
        # Triton's interpreter truncates fp32 -> bf16 instead of rounding to nearest: one ulp apart.
        ulp = (x + res).float().abs() * 2.0**-7
        assert bool(((new_res.float() - (x + res).float()).abs() <= ulp).all())
    h = (x + res).float()
    hf = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).bfloat16()  # LlamaRMSNorm
    assert rel_err(out, hf) < 8e-3


def test_rms_norm_rejects_a_wrong_weight():
    with pytest.raises(ValueError, match="weight shape"):
        rms_norm(torch.zeros(2, 8, device=DEVICE), torch.ones(4, device=DEVICE), 1e-5)


@settings(max_examples=10, deadline=None)
@given(
    tokens=st.integers(1, 5),
    heads=st.integers(1, 5),
    kv_heads=st.integers(1, 3),
    head_dim=st.sampled_from([4, 16, 64, 96]),
    interleaved=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_rotary_matches_torch(tokens, heads, kv_heads, head_dim, interleaved, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, heads, head_dim, generator=gen).to(DEVICE)
    k = torch.randn(tokens, kv_heads, head_dim, generator=gen).to(DEVICE)
    positions = torch.randint(0, 500, (tokens,), generator=gen).to(DEVICE)
    cos, sin = rotary_cos_sin(512, head_dim, base=10000.0, device=DEVICE)
    q_out, k_out = rotary_embedding(q, k, positions, cos, sin, interleaved=interleaved)
    ref = torch_rotary_interleaved if interleaved else torch_rotary_neox
    assert rel_err(q_out, ref(q.cpu(), positions.cpu(), 10000.0)) < 1e-6
    assert rel_err(k_out, ref(k.cpu(), positions.cpu(), 10000.0)) < 1e-6


def test_rotary_inplace_and_half_precision():
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(3, 4, 32, generator=gen).bfloat16().to(DEVICE)
    k = torch.randn(3, 2, 32, generator=gen).bfloat16().to(DEVICE)
    positions = torch.tensor([0, 7, 300], device=DEVICE)
    cos, sin = rotary_cos_sin(400, 32, base=500000.0, device=DEVICE)
    q_ref = torch_rotary_neox(q.cpu(), positions.cpu(), 500000.0)
    k_ref = torch_rotary_neox(k.cpu(), positions.cpu(), 500000.0)
    q_out, k_out = rotary_embedding(q, k, positions, cos, sin, inplace=True)
    assert q_out.data_ptr() == q.data_ptr() and k_out.data_ptr() == k.data_ptr()
    assert rel_err(q, q_ref) < 8e-3 and rel_err(k, k_ref) < 8e-3
    assert torch.equal(q[0], q_out[0])  # position 0 is the identity rotation


def test_interleaved_equals_half_split_on_permuted_dims():
    """The two conventions are one rotation with the head's dimensions reordered (what GGUF's Q/K
    permutation undoes): interleaved on x == half-split on x[evens + odds], mapped back."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(4, 2, 16, generator=gen).to(DEVICE)
    k = torch.randn(4, 1, 16, generator=gen).to(DEVICE)
    positions = torch.tensor([1, 2, 50, 99], device=DEVICE)
    cos, sin = rotary_cos_sin(100, 16, device=DEVICE)
    perm = torch.cat((torch.arange(0, 16, 2), torch.arange(1, 16, 2))).to(DEVICE)
    q_i, k_i = rotary_embedding(q, k, positions, cos, sin, interleaved=True)
    q_n, k_n = rotary_embedding(q[..., perm].contiguous(), k[..., perm].contiguous(), positions, cos, sin)
    assert torch.allclose(q_i[..., perm], q_n, atol=1e-6) and torch.allclose(k_i[..., perm], k_n, atol=1e-6)


def test_rotary_rejects_bad_tables():
    q = torch.zeros(2, 2, 8, device=DEVICE)
    cos, sin = rotary_cos_sin(10, 16, device=DEVICE)
    with pytest.raises(ValueError, match="cos/sin"):
        rotary_embedding(q, q, torch.zeros(2, dtype=torch.long, device=DEVICE), cos, sin)


def test_rms_norm_rows_are_batch_invariant():
    """One program per row with a fixed block: a row alone and inside a batch give the same bits."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(7, 576, generator=gen).to(DEVICE)
    w = torch.randn(576, generator=gen).to(DEVICE)
    together = rms_norm(x, w, 1e-5)
    for i in (0, 3, 6):
        assert torch.equal(rms_norm(x[i : i + 1], w, 1e-5)[0], together[i])


def test_rotary_on_views_of_a_fused_qkv_projection():
    """The engine slices q and k out of one qkv matrix: strided views, not contiguous tensors."""
    gen = torch.Generator().manual_seed(7)
    heads, kv_heads, dim, tokens = 3, 1, 16, 5
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(DEVICE)
    q = qkv[:, : heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    positions = torch.tensor([3, 4, 5, 6, 7], device=DEVICE)
    cos, sin = rotary_cos_sin(16, dim, device=DEVICE)
    q_out, k_out = rotary_embedding(q, k, positions, cos, sin)
    assert rel_err(q_out, torch_rotary_neox(q.cpu(), positions.cpu(), 10000.0)) < 1e-6
    assert rel_err(k_out, torch_rotary_neox(k.cpu(), positions.cpu(), 10000.0)) < 1e-6
