"""A linear layer that picks its matmul by batch shape and precision.

- float32: a dense float32 weight (exact dequantized GGUF values; what correctness tests compare).
- bfloat16: a dense bfloat16 weight for wide inputs (prefill) and, when the GGUF held Q4_1 and the compute path
  asked for it, the exact 4-bit codes in torch's CPU int4 packed format for narrow inputs (decode), which reads
  4x fewer weight bytes. A float32 model (a CPU without bfloat16 dot products) gets the same int4 matmuls for
  its decode rows, rounded to bfloat16 on the way in (the kernel's fast input) and widened on the way out.
  Q4_1's ``q * d + m`` is the int4 kernel's ``(q - 8) * scale + zero`` with ``scale = d``, ``zero = m + 8d``.
- bfloat16 with a Q8_0 weight (the tied embedding / LM head of the default model): for narrow inputs the exact
  8-bit codes through the same int4 kernel, each code split as ``q = 16 * hi + lo`` (``hi`` in -8..7, ``lo`` in
  0..15): ``W = W_hi + W_lo`` with both halves int4 in 32-column groups (scales ``16 d`` and ``d``, zeros ``0`` and
  ``8 d``), one matmul of ``[x, x]`` against ``[W_hi | W_lo]``. It reads half the bytes of the bfloat16 GEMV, the
  largest matmul of a decode step.
- native (bfloat16, CPU with AVX-512 VNNI, ``cpu_native``): for up to ``NATIVE_MAX_ROWS`` rows the exact Q4_1
  / Q8_0 codes through the C GEMV kernel (x as int16 codes, integer block dot products, float32 scales), which
  skips the int4 kernel's dequantization; the Q8_0 head then returns float32 logits (no bfloat16 rounding).
- float32 weights under bfloat16 activations (a CPU without bfloat16 dot products, ``compute_path``): the wide
  matmuls widen their rows to float32 and round the product back once; narrow rows take the paths above.
- integer prefill (a CPU with AVX-512 VNNI and no bfloat16 dot products, ``compute_path``): wide inputs (more
  than ``NATIVE_MAX_ROWS`` rows) go through ``cpu_gemm`` (int16 codes per weight channel and per row, VNNI dot
  products) on its copy of the weight, made once here; the float weight stays for the rest (batch-invariant
  tiles, the dense reference, inputs the kernel refuses).
- batch-invariant mode: rows go through the matmul in fixed-size tiles (the last one padded), so the
  kernel and its reduction order seen by a row never depend on how many other rows share the step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from llmtrace.backend.model import cpu_gemm, cpu_native
from llmtrace.backend.model.gguf_reader import Q4_1_BLOCK, Q4_1Parts, Q8_0Parts

INT4_MAX_ROWS = 16  # above this many rows the dense bfloat16 GEMM is faster than the int4 kernel (measured)
INVARIANT_TILE = 8  # rows per matmul call in batch-invariant mode
NATIVE_MAX_ROWS = 16  # rows the native GEMV serves (it streams the weights once per 8 rows)
INT4_DTYPE = torch.bfloat16  # the activations torch's CPU int4 kernel is fast with (float32: ~30x slower)


def row_bucket(rows: int) -> int:
    """The row count a CPU bfloat16 GEMM of ``rows`` rows runs at. oneDNN keeps per-shape state (primitive
    cache entries, JIT-compiled kernels) for every distinct row count it sees and never gives it back: a
    server whose steps batch 1..2048 tokens grew by ~0.35 MB per new shape, 470 -> 880 MB over 5,000
    requests. Rounding up to a few dozen buckets bounds that, for at most 15, 63 or 127 padded rows
    (exact up to 16 rows, where decode batches live; float32 and the int4/int8 paths are not affected)."""
    if rows <= 16:
        return rows
    step = 16 if rows <= 128 else 64 if rows <= 512 else 128
    return -(-rows // step) * step


def _bucketed_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    rows = x.shape[0]
    padded = row_bucket(rows)
    if padded == rows:
        return F.linear(x, weight)
    return F.linear(F.pad(x, (0, 0, 0, padded - rows)), weight)[:rows]


def int4_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"
    )


class Linear:
    """``y = x @ W.T`` with ``W: [out_features, in_features]``; no bias (Llama has none)."""

    __slots__ = ("weight", "int4_weight", "int4_scale_zero", "split_q8", "out_features", "in_features", "native",
                 "native_dtype", "wide_int")

    def __init__(self, weight: torch.Tensor, q4: Q4_1Parts | None = None, q8: Q8_0Parts | None = None,
                 act_dtype: torch.dtype | None = None, int_gemm: bool = False) -> None:
        """``act_dtype``: the activations' dtype where it is not the weight's (bfloat16 rows, float32 weights);
        ``int_gemm``: wide inputs on the integer VNNI kernel (where it is built; else the dense matmul)."""
        self.weight = weight.contiguous()
        self.wide_int = cpu_gemm.pack(self.weight) if int_gemm else None
        self.out_features, self.in_features = weight.shape
        self.int4_weight: torch.Tensor | None = None
        self.int4_scale_zero: torch.Tensor | None = None
        self.split_q8 = False  # int4_weight holds a Q8_0 matrix split in two int4 halves (input fed twice)
        self.native: cpu_native.QuantWeight | None = None  # the codes in the native GEMV's layout
        self.native_dtype = act_dtype or weight.dtype  # what the native path returns (float32 for the Q8_0 head)
        # codes are handed in only where the compute path asked for the int4 decode (compute_path.py)
        on_cpu = weight.device.type == "cpu"
        if on_cpu and q8 is not None:
            self.native = cpu_native.q8_0_weight(q8.codes, q8.scale)
            self.native_dtype = torch.float32
        if on_cpu and q4 is not None:
            self.native = cpu_native.q4_1_weight(q4.codes, q4.scale, q4.minimum)
        # torch's int4 kernel is fast with bfloat16 activations only: its scales are bfloat16 whatever the
        # weight dtype, and a float32 row is rounded to bfloat16 on the way in (``_int4``)
        if q8 is not None and on_cpu and int4_available():
            q = torch.from_numpy(q8.codes).to(torch.int32)
            d = torch.from_numpy(q8.scale)
            codes = torch.cat([(q >> 4) + 8, q & 15], dim=1)  # arithmetic shift: hi = floor(q / 16)
            self.int4_weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
            scale = torch.cat([16.0 * d, d], dim=1)
            zero = torch.cat([torch.zeros_like(d), 8.0 * d], dim=1)
            self.int4_scale_zero = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(INT4_DTYPE)
            self.split_q8 = True
        if q4 is not None and on_cpu and int4_available():
            codes = torch.from_numpy(q4.codes).to(torch.int32)
            self.int4_weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
            scale = torch.from_numpy(q4.scale)
            zero = torch.from_numpy(q4.minimum) + 8.0 * scale
            # the kernel wants [in_features // group, out_features, 2]
            self.int4_scale_zero = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(INT4_DTYPE)

    @property
    def kernel(self) -> str:
        if self.wide_int is not None:
            return "vnni_i16+" + self._narrow_kernel()
        return self._narrow_kernel()

    def _narrow_kernel(self) -> str:
        if self.native is not None:
            return f"native_q{self.native.kind}+" + ("q8_as_2xint4+dense" if self.split_q8 else "int4+dense")
        if self.split_q8:
            return "q8_as_2xint4+dense"
        return "int4+dense" if self.int4_weight is not None else "dense"

    def __call__(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        if invariant:
            return self._tiled(x)
        if self.native is not None and x.shape[0] <= NATIVE_MAX_ROWS:
            y = cpu_native.quant_matmul(self.native, x, self.native_dtype)
            if y is not None:
                return y
        if self.int4_weight is not None and x.shape[0] <= INT4_MAX_ROWS:
            return self._int4(x)
        if self.wide_int is not None and x.shape[0] > NATIVE_MAX_ROWS:
            y = cpu_gemm.matmul(self.wide_int, x)
            if y is not None:
                return y
        if x.dtype == torch.bfloat16 and self.weight.dtype == torch.bfloat16 and x.device.type == "cpu" and x.dim() == 2:
            return _bucketed_linear(x, self.weight)
        return self.dense(x)

    def dense(self, x: torch.Tensor) -> torch.Tensor:
        """The dense product in the weight's dtype, returned in ``x``'s (one rounding where they differ)."""
        if x.dtype == self.weight.dtype:
            return F.linear(x, self.weight)
        return F.linear(x.to(self.weight.dtype), self.weight).to(x.dtype)

    def _int4(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        if dtype != INT4_DTYPE:  # a float32 model's decode row (its wide matmuls stay float32)
            x = x.to(INT4_DTYPE)
        if self.split_q8:
            x = torch.cat([x, x], dim=1)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.int4_weight, Q4_1_BLOCK, self.int4_scale_zero)
        return y if dtype == INT4_DTYPE else y.to(dtype)

    def _tiled(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        pad = (-rows) % INVARIANT_TILE
        if pad:
            x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
        # the split Q8_0 head stays dense here, as batch-invariant runs have always computed it
        op = self._int4 if self.int4_weight is not None and not self.split_q8 else self.dense
        out = torch.cat([op(tile) for tile in x.split(INVARIANT_TILE)])
        return out[:rows]


def concat_q4(parts: list[Q4_1Parts | None]) -> Q4_1Parts | None:
    """Stack several Q4_1 matrices row-wise (fused QKV, fused gate/up); None if any is not Q4_1."""
    import numpy as np

    if any(p is None for p in parts):
        return None
    return Q4_1Parts(
        codes=np.concatenate([p.codes for p in parts if p is not None]),  # none is, checked above
        scale=np.concatenate([p.scale for p in parts if p is not None]),
        minimum=np.concatenate([p.minimum for p in parts if p is not None]),
    )
