"""The fused bfloat16 decode layers: each layer's two halves as one native call each (``cpu_native.c``).

A decode step of a small model on a CPU spends more time dispatching ~70 small torch ops per layer than
computing; here one call does norm, QKV (on the exact Q4_1 codes), rotary, the cache write, paged attention,
the output projection and the residual, and another the norm, gate/up, SiLU, down and residual. The forward
pass still times each half under its own section (``attention``, ``feed_forward``), so stage values keep
their meaning. Used for steps where every sequence decodes one token, in bfloat16 on a CPU whose native
library loaded; every other step (prefill, chunked prefill, drafts, batch-invariant mode) runs the torch ops.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import torch

from llmtrace.backend.model import cpu_native

if TYPE_CHECKING:
    from llmtrace.backend.kernels.interface import AttentionBackend, AttentionMetadata
    from llmtrace.backend.model.config import ModelConfig
    from llmtrace.backend.model.linear import Linear
    from llmtrace.backend.model.weights import LayerWeights

def _records(lin: Linear) -> int:
    """Address of a layer matrix's native records (``build`` checked every one has them)."""
    if lin.native is None:
        raise ValueError("a layer matrix without native weights")
    return lin.native.records.data_ptr()


MAX_ROWS = 16  # sequences per step the fused path takes (its GEMV streams the weights once per 8 rows)


class NativeDecode:
    """Per-layer pointers into one model's native weights; ``None`` from ``build`` where it cannot run."""

    def __init__(self, cfg: ModelConfig, layers: list[LayerWeights], lib: ctypes.CDLL) -> None:
        self.cfg = cfg
        self.lib = lib
        self.layers = layers  # keeps the weight tensors alive
        self._ptr_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # the caches the table points into
        self._ptr_table = torch.empty(0, dtype=torch.int64)
        self.ptrs = [
            (lw.attn_norm.data_ptr(), _records(lw.qkv), _records(lw.o), lw.ffn_norm.data_ptr(), _records(lw.gate_up),
             _records(lw.down))
            for lw in layers
        ]

    @classmethod
    def build(cls, cfg: ModelConfig, layers: list[LayerWeights], dtype: torch.dtype) -> NativeDecode | None:
        lib = cpu_native.load()
        if lib is None or dtype != torch.bfloat16 or cfg.head_dim != 64 or cfg.num_heads % cfg.num_kv_heads:
            return None
        if cfg.num_heads // cfg.num_kv_heads > 4:
            return None
        for lw in layers:
            if lw.attn_norm.device.type != "cpu" or lw.attn_norm.dtype != torch.float32:
                return None
            if lw.ffn_norm.dtype != torch.float32:
                return None
            for lin in (lw.qkv, lw.o, lw.gate_up, lw.down):
                if lin.native is None or lin.native.kind != 4:
                    return None
        return cls(cfg, layers, lib)

    def applies(
        self, num_tokens: int, meta: AttentionMetadata, attention: AttentionBackend, invariant: bool,
        kv_dtype: torch.dtype,
    ) -> bool:
        """Every sequence decodes one token, and attention would have used its native kernel too."""
        return (
            not invariant
            and meta.max_query_len == 1
            and num_tokens == len(meta.seq_lens_list)
            and num_tokens <= MAX_ROWS
            and kv_dtype == torch.bfloat16
            and getattr(attention, "native", None) is not None
            and meta.block_tables.dtype == torch.int32
            and meta.seq_lens.dtype == torch.int32
        )

    def step(self, hidden: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
             cos: torch.Tensor, sin: torch.Tensor, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> NativeStep:
        return NativeStep(self, hidden, positions, meta, cos, sin, self._layer_ptrs(kv_caches), kv_caches[0][0].shape[1])

    def _layer_ptrs(self, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """int64 [layers, 8]: the weights' and this cache's addresses, rebuilt whenever any layer's cache tensor
        is not the one seen last step (the engine passes the same tensors every step)."""
        seen = self._ptr_caches
        if seen is None or len(seen) != len(kv_caches) or any(
            a[0] is not b[0] or a[1] is not b[1] for a, b in zip(seen, kv_caches, strict=True)
        ):
            rows = [list(w) + [k.data_ptr(), v.data_ptr()] for w, (k, v) in zip(self.ptrs, kv_caches, strict=False)]
            self._ptr_table = torch.tensor(rows, dtype=torch.int64)
            self._ptr_caches = list(kv_caches)
        return self._ptr_table


class NativeStep:
    """One decode step's buffers and arguments; ``attention(i)`` and ``mlp(i)`` update ``hidden``."""

    def __init__(self, owner: NativeDecode, hidden: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                 cos: torch.Tensor, sin: torch.Tensor, layer_ptrs: torch.Tensor, block_size: int) -> None:
        cfg = owner.cfg
        self.owner = owner
        self.hidden = hidden.contiguous()
        rows, hid = self.hidden.shape
        qkv_n = cfg.q_size + 2 * cfg.kv_size
        attn_work = rows * (3 * hid + qkv_n + cfg.q_size + cfg.num_heads * (meta.max_seq_len + 16))
        mlp_work = rows * (3 * hid + 3 * cfg.intermediate_size)
        work = torch.empty(max(attn_work, mlp_work), dtype=torch.float32)
        positions, slots = positions.contiguous(), meta.slot_mapping.contiguous()
        tables, seq_lens = meta.block_tables.contiguous(), meta.seq_lens.contiguous()
        self._keep = (work, positions, slots, tables, seq_lens, cos, sin, layer_ptrs)  # alive while C reads them
        self.args = cpu_native.DecodeStep(
            hidden=self.hidden.data_ptr(), rows=rows, hid=hid, heads=cfg.num_heads, kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim, block_size=block_size, inter=cfg.intermediate_size, table_width=tables.shape[1],
            eps=cfg.rms_eps, scale=cfg.head_dim**-0.5, layer_ptrs=layer_ptrs.data_ptr(), cos_t=cos.data_ptr(),
            sin_t=sin.data_ptr(), positions=positions.data_ptr(), slots=slots.data_ptr(), tables=tables.data_ptr(),
            seq_lens=seq_lens.data_ptr(), work=work.data_ptr(),
        )
        self._ref = ctypes.byref(self.args)
        self._attention = owner.lib.step_attention
        self._mlp = owner.lib.step_mlp

    def attention(self, index: int) -> None:
        if self._attention(self._ref, index) != 0:  # shapes were checked when the path was chosen: a bug
            raise RuntimeError(f"native decode attention refused layer {index}")

    def mlp(self, index: int) -> None:
        if self._mlp(self._ref, index) != 0:
            raise RuntimeError(f"native decode MLP refused layer {index}")
