"""The integer prefill GEMM (``cpu_gemm_int.c``, in the native library): a prefill's wide matmuls on AVX-512
VNNI integer dot products, for CPUs without bfloat16 dot products.

The weights are quantized once at load, per output channel, to int16 codes (``pack``); each call quantizes its
rows, per row, to int16 codes, multiplies with vpdpwssd (32 products an instruction, an FMA's 16) and scales
the int32 sums back in float32. Why int16 rather than int8 codes: see the C file's header (int8 rows are ten
times the bfloat16 model's error on this model's outlier channels; these codes are the float32 path's own).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmtrace.backend.model import cpu_native

LABEL = "vnni_i16"  # the prefill path's name for these matmuls (forward stages, serve's ready line)


@dataclass(frozen=True, slots=True)
class IntWeight:
    """``W: [n, k]`` as the kernel's panels of int16 code pairs (``packed``) and per-channel float32 scales."""

    packed: torch.Tensor  # int32
    scale: torch.Tensor  # float32, n padded to the kernel's panel width
    n: int
    k: int


def available() -> bool:
    """Whether the kernel is built here (the native library: AVX-512 F/BW/VNNI)."""
    return cpu_native.load() is not None


def pack(weight: torch.Tensor) -> IntWeight | None:
    """The kernel's copy of a float ``[n, k]`` CPU weight, or None where the kernel is not built."""
    lib = cpu_native.load()
    if lib is None or weight.dim() != 2 or weight.device.type != "cpu":
        return None
    w = weight.detach().to(torch.float32).contiguous()
    n, k = w.shape
    packed = torch.empty(int(lib.gemm_i16_packed_size(n, k)), dtype=torch.int32)
    scale = torch.zeros(-(-n // 48) * 48, dtype=torch.float32)
    if lib.gemm_pack_i16(w.data_ptr(), n, k, packed.data_ptr(), scale.data_ptr()) != 0:
        return None
    return IntWeight(packed, scale, n, k)


def matmul(weight: IntWeight, x: torch.Tensor) -> torch.Tensor | None:
    """``x @ W.T`` for ``x: [m, k]`` (bfloat16 or float32), in ``x``'s dtype; None when the kernel cannot take
    these inputs (the caller's float32 matmul serves)."""
    lib = cpu_native.load()
    if lib is None or x.dim() != 2 or x.shape[1] != weight.k or x.device.type != "cpu":
        return None
    if x.dtype not in (torch.bfloat16, torch.float32) or x.shape[0] == 0:
        return None
    x = x.contiguous()
    y = torch.empty(x.shape[0], weight.n, dtype=x.dtype)
    half = x.dtype == torch.bfloat16
    rc = lib.gemm_i16(weight.packed.data_ptr(), weight.scale.data_ptr(), weight.n, weight.k,
                      x.data_ptr() if half else None, None if half else x.data_ptr(), x.shape[0],
                      y.data_ptr() if half else None, None if half else y.data_ptr())
    return y if rc == 0 else None
