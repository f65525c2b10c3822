"""A linear layer that picks its matmul by batch shape and precision.

- float32: a dense float32 weight (exact dequantized GGUF values; what correctness tests compare).
- bfloat16: a dense bfloat16 weight for wide inputs (prefill) and, when the GGUF held Q4_1, the exact 4-bit
  codes in torch's CPU int4 packed format for narrow inputs (decode), which reads 4x fewer weight bytes.
  Q4_1's ``q * d + m`` is the int4 kernel's ``(q - 8) * scale + zero`` with ``scale = d``, ``zero = m + 8d``.
- bfloat16 with a Q8_0 weight (the tied embedding / LM head of the default model): for narrow inputs the exact
  8-bit codes, one ``_weight_int8pack_mm`` per 32-column block (its scale is per row, Q8_0's is per row and
  block) summed in float32; it reads half the bytes of the bfloat16 GEMV, the largest matmul of a decode step.
- batch-invariant mode: rows go through the matmul in fixed-size tiles (the last one padded), so the
  kernel and its reduction order seen by a row never depend on how many other rows share the step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from llmtrace.backend.model.gguf_reader import Q4_1_BLOCK, Q4_1Parts, Q8_0Parts

INT4_MAX_ROWS = 16  # above this many rows the dense bfloat16 GEMM is faster than the int4 kernel (measured)
INT8_MAX_ROWS = 1  # torch's int8 weight-only kernel is a GEMV: at 2 rows it is already slower than bfloat16 (measured)
INVARIANT_TILE = 8  # rows per matmul call in batch-invariant mode


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


def int8_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


def int4_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"
    )


class Linear:
    """``y = x @ W.T`` with ``W: [out_features, in_features]``; no bias (Llama has none)."""

    __slots__ = ("weight", "int4_weight", "int4_scale_zero", "int8_blocks", "out_features", "in_features")

    def __init__(self, weight: torch.Tensor, q4: Q4_1Parts | None = None, q8: Q8_0Parts | None = None) -> None:
        self.weight = weight.contiguous()
        self.out_features, self.in_features = weight.shape
        self.int4_weight: torch.Tensor | None = None
        self.int4_scale_zero: torch.Tensor | None = None
        # per 32-column block: (first column, int8 codes [out, 32], bfloat16 scales [out])
        self.int8_blocks: tuple[tuple[int, torch.Tensor, torch.Tensor], ...] | None = None
        if q8 is not None and weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and int8_available():
            codes = torch.from_numpy(q8.codes)
            scale = torch.from_numpy(q8.scale).to(torch.bfloat16)
            self.int8_blocks = tuple(
                (b * Q4_1_BLOCK, codes[:, b * Q4_1_BLOCK : (b + 1) * Q4_1_BLOCK].contiguous(), scale[:, b].contiguous())
                for b in range(self.in_features // Q4_1_BLOCK)
            )
        if q4 is not None and weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and int4_available():
            codes = torch.from_numpy(q4.codes).to(torch.int32)
            self.int4_weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
            scale = torch.from_numpy(q4.scale)
            zero = torch.from_numpy(q4.minimum) + 8.0 * scale
            # the kernel wants [in_features // group, out_features, 2]
            self.int4_scale_zero = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(weight.dtype)

    @property
    def kernel(self) -> str:
        if self.int8_blocks is not None:
            return "int8+dense"
        return "int4+dense" if self.int4_weight is not None else "dense"

    def __call__(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        if invariant:
            return self._tiled(x)
        if self.int4_weight is not None and x.shape[0] <= INT4_MAX_ROWS:
            return self._int4(x)
        if self.int8_blocks is not None and x.shape[0] <= INT8_MAX_ROWS:
            return self._int8(x)
        if x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.dim() == 2:
            return _bucketed_linear(x, self.weight)
        return F.linear(x, self.weight)

    def _int8(self, x: torch.Tensor) -> torch.Tensor:
        """Float32 ``[rows, out]``: each block's bfloat16 partial product accumulated in float32."""
        mm = torch.ops.aten._weight_int8pack_mm
        blocks = self.int8_blocks
        assert blocks is not None
        out = mm(x[:, : Q4_1_BLOCK].contiguous(), blocks[0][1], blocks[0][2]).float()
        for col, codes, scale in blocks[1:]:
            out += mm(x[:, col : col + Q4_1_BLOCK].contiguous(), codes, scale)
        return out

    def _int4(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.int4_weight, Q4_1_BLOCK, self.int4_scale_zero)

    def _tiled(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        pad = (-rows) % INVARIANT_TILE
        if pad:
            x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
        op = self._int4 if self.int4_weight is not None else (lambda t: F.linear(t, self.weight))
        out = torch.cat([op(tile) for tile in x.split(INVARIANT_TILE)])
        return out[:rows]


def concat_q4(parts: list[Q4_1Parts | None]) -> Q4_1Parts | None:
    """Stack several Q4_1 matrices row-wise (fused QKV, fused gate/up); None if any is not Q4_1."""
    import numpy as np

    if any(p is None for p in parts):
        return None
    return Q4_1Parts(
        codes=np.concatenate([p.codes for p in parts]),  # type: ignore[union-attr]
        scale=np.concatenate([p.scale for p in parts]),  # type: ignore[union-attr]
        minimum=np.concatenate([p.minimum for p in parts]),  # type: ignore[union-attr]
    )
