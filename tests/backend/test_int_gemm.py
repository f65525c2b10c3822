"""The integer prefill GEMM (``backend/model/cpu_gemm_int.c`` through ``cpu_gemm``): against a float64 matmul
of the same inputs with a stated tolerance, on odd shapes and outlier channels; the same bits on one and two
threads; and the real model's prefill logits on it no further from float32's than the float32 matmuls'.

It runs on any CPU with AVX-512 F/BW/VNNI (the native library), a BF16 one too; it skips only where the CPU
lacks them, and fails where the CPU has them but the library did not build."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from paged_helpers import PagedHarness

from llmtrace.backend.model import cpu_features, cpu_gemm, cpu_native
from llmtrace.backend.model.compute_path import choose
from llmtrace.backend.model.cpu_features import CpuFeatures
from llmtrace.backend.model.gguf_reader import GGUFModelFile
from llmtrace.backend.model.llama import LlamaModel

# Typical rows (no outlier), per row relative to the float64 product's norm: codes of +-8191 per row and +-2047
# per weight channel put the error near 2^-11 (6e-4 expected, 4.9e-4 to 5.7e-4 measured); a float32 matmul's
# output rounded to bfloat16 is 2^-9.5 off. With outlier channels the bound below is the rule.
TOLERANCE = 2**-9
ACT_CODES, WEIGHT_CODES = 8191, 2047


@pytest.fixture(scope="module", autouse=True)
def kernel_built() -> None:
    host = cpu_features.detect()
    if not host.native_kernels:
        pytest.skip(f"this CPU ({host.isa}) lacks AVX-512 F/BW/VNNI or F16C: no integer prefill kernel "
                    f"({cpu_native.load_error or 'not built'})")
    assert cpu_gemm.available(), f"the native library should build on this CPU: {cpu_native.load_error}"


def _case(rows: int, n: int, k: int, seed: int, dtype: torch.dtype,
          outliers: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * k**-0.5
    x = torch.randn(rows, k, generator=gen) * 2
    if outliers:
        w[n // 3] *= 40  # a loud output channel (its own scale: the others keep their codes)
        x[:, k // 5] *= 300  # an outlier input channel, as this model's activations have
    x[rows // 2] = 0.0  # an all-zero row (scale 1, codes 0)
    return x.to(dtype), w


def _rounding_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The most the codes can be off, per output: half a row step on every input times the channel's weights,
    and half a channel step on every weight times the row's inputs (float32 sums on top: 2^-20 of the terms)."""
    xd, wd = x.double(), w.double()
    row_step = xd.abs().amax(1, keepdim=True) / ACT_CODES
    channel_step = wd.abs().amax(1, keepdim=True) / WEIGHT_CODES
    terms = xd.abs() @ wd.abs().T
    return 0.5 * row_step * wd.abs().sum(1)[None, :] + 0.5 * channel_step.T * xd.abs().sum(1, keepdim=True) \
        + 2**-20 * terms


@pytest.mark.parametrize(("rows", "n", "k"), [(17, 960, 576), (203, 576, 1536), (1, 100, 577), (64, 3072, 64),
                                              (250, 49, 130)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_a_float64_matmul(rows: int, n: int, k: int, dtype: torch.dtype) -> None:
    """Rows not a multiple of the 8-row tile, channels not of the 48-channel panel, odd columns, K past one
    128-column widening. With a loud channel and an outlier input: every output within the codes' rounding
    bound of the float64 product of the same inputs (bfloat16 output: plus its own rounding); typical rows:
    every row within TOLERANCE of it, as close as the float32 matmul it replaces rounded to bfloat16."""
    extra = 2**-8 if dtype == torch.bfloat16 else 0.0  # the output's own rounding to bfloat16
    for outliers in (True, False):
        x, w = _case(rows, n, k, seed=rows + n + k, dtype=dtype, outliers=outliers)
        packed = cpu_gemm.pack(w)
        assert packed is not None and packed.n == n and packed.k == k
        got = cpu_gemm.matmul(packed, x)
        assert got is not None and got.dtype == dtype and got.shape == (rows, n)
        want = x.double() @ w.double().T
        err = (got.double() - want).abs()
        assert (err <= _rounding_bound(x, w) + extra * want.abs()).all(), (outliers, err.max().item())
        assert torch.equal(got[rows // 2].float(), torch.zeros(n))  # the zero row stays exactly zero
        if not outliers:
            size = want.norm(dim=1).clamp_min(1e-30)
            rel = (got.double() - want).norm(dim=1) / size
            assert (rel[size > 1e-20] <= TOLERANCE + extra).all(), rel.max().item()


def test_two_threads_give_the_same_bits() -> None:
    """Each (row block, panel) tile is one thread's whole sum: the same bits on one thread as on two."""
    x, w = _case(300, 960, 576, seed=9, dtype=torch.bfloat16)
    packed = cpu_gemm.pack(w)
    assert packed is not None
    one = cpu_gemm.matmul(packed, x)
    torch.set_num_threads(2)  # the autouse fixture puts it back
    two = cpu_gemm.matmul(packed, x)
    assert one is not None and two is not None and torch.equal(one, two)


def test_the_kernel_refuses_what_it_does_not_take() -> None:
    x, w = _case(20, 96, 64, seed=1, dtype=torch.float32)
    packed = cpu_gemm.pack(w)
    assert packed is not None
    assert cpu_gemm.matmul(packed, x[:, :63].contiguous()) is None  # another width
    assert cpu_gemm.matmul(packed, x.double()) is None
    assert cpu_gemm.matmul(packed, x[:0]) is None


def _no_bf16(host: CpuFeatures) -> CpuFeatures:
    """The host as a CPU without bfloat16 dot products sees it (the path this kernel is the default on)."""
    gone = host.flags & {"avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}
    return CpuFeatures(host.flags - gone, host.hidden | gone, "nobf16", host.torch_capability, host.model)


def _prefill_logits(model: LlamaModel, ids: list[int], chunks: list[int]) -> torch.Tensor:
    h = PagedHarness(model, num_blocks=64, block_size=16, seed=3)
    seq = h.new_sequence(ids)
    return torch.cat([h.step([(seq, n)])[0] for n in chunks])


def test_real_model_prefill_on_the_kernel_stays_as_close_to_float32(gguf_path: Path, tokenizer,  # noqa: ANN001
                                                                    real_f32: LlamaModel,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The no-bfloat16 path's model (bfloat16 activations and cache, the fused int4 decode): its logits at every
    position of a 150-token prompt, whole and in two chunks, with the wide matmuls on the integer kernel, no
    further from the float32 model's than with the float32 matmuls (the path before), the same next tokens
    nearly always (measured on the AVX-512 Xeon without BF16: 0.0169 against 0.0186, 146 and 147 of 150)."""
    monkeypatch.delenv("LLMTRACE_PREFILL_GEMM", raising=False)
    compute = choose("cpu", "auto", features=_no_bf16(cpu_features.detect()))
    assert compute.prefill_gemm == "vnni_i16", compute
    model = LlamaModel.from_gguf_path(GGUFModelFile(gguf_path), compute)
    assert model.path_labels()[0].startswith("vnni_i16_gemm+")
    ids = tokenizer.encode(" ".join(f"Item {i}: a crate of {i * 7 % 13} apples left the depot." for i in range(12)))
    ids = ids[:150]
    random.Random(1).shuffle(ids[100:])  # a tail that is not a repeat of the head
    want = real_f32.forward_dense(ids)
    calls: list[int] = []
    real_matmul = cpu_gemm.matmul

    def counted(weight: cpu_gemm.IntWeight, x: torch.Tensor) -> torch.Tensor | None:
        out = real_matmul(weight, x)
        calls.append(0 if out is None else x.shape[0])
        return out

    monkeypatch.setattr(cpu_gemm, "matmul", counted)
    for chunks in ([150], [100, 50]):
        calls.clear()
        got = _prefill_logits(model, ids, chunks)
        assert sorted(set(calls)) == sorted(set(chunks)), calls  # every layer matmul on the kernel
        with monkeypatch.context() as m:
            for layer in model.weights.layers:
                for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
                    m.setattr(lin, "wide_int", None)  # the float32 matmuls
            f32 = _prefill_logits(model, ids, chunks)
        rel = ((got - want).norm() / want.norm()).item()
        ref_rel = ((f32 - want).norm() / want.norm()).item()
        assert rel <= 1.1 * ref_rel and rel < 0.05, (chunks, rel, ref_rel)
        agree = int((got.argmax(1) == want.argmax(1)).sum())
        ref_agree = int((f32.argmax(1) == want.argmax(1)).sum())
        assert agree >= ref_agree - 3, (chunks, agree, ref_agree)
