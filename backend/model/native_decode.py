"""The fused bfloat16 decode layers: each layer's two halves as one native call each (``cpu_native.c``).

A decode step of a small model on a CPU spends more time dispatching ~70 small torch ops per layer than
computing; here one call does norm, QKV (on the exact Q4_1 codes), rotary, the cache write, paged attention,
the output projection and the residual, and another the norm, gate/up, SiLU, down and residual. The forward
pass still times each half under its own section (``attention``, ``feed_forward``), so stage values keep
their meaning. Used for steps where every sequence decodes one token, in bfloat16 on a CPU whose native
library loaded; every other step (prefill, chunked prefill, drafts, batch-invariant mode) runs the torch ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from llmtrace.backend.model import cpu_native

if TYPE_CHECKING:
    import ctypes

    from llmtrace.backend.kernels.interface import AttentionBackend, AttentionMetadata
    from llmtrace.backend.model.config import ModelConfig
    from llmtrace.backend.model.weights import LayerWeights

MAX_ROWS = 16  # sequences per step the fused path takes (its GEMV streams the weights once per 8 rows)


class NativeDecode:
    """Per-layer pointers into one model's native weights; ``None`` from ``build`` where it cannot run."""

    def __init__(self, cfg: ModelConfig, layers: list[LayerWeights], lib: ctypes.CDLL) -> None:
        self.cfg = cfg
        self.lib = lib
        self.layers = layers  # keeps the weight tensors alive
        self.ptrs = [
            (lw.attn_norm.data_ptr(), lw.qkv.native.records.data_ptr(), lw.o.native.records.data_ptr(),  # type: ignore[union-attr]
             lw.ffn_norm.data_ptr(), lw.gate_up.native.records.data_ptr(), lw.down.native.records.data_ptr())  # type: ignore[union-attr]
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
             cos: torch.Tensor, sin: torch.Tensor) -> NativeStep:
        return NativeStep(self, hidden, positions, meta, cos, sin)


class NativeStep:
    """One decode step's buffers and arguments; ``attention(i, ...)`` and ``mlp(i)`` update ``hidden``."""

    def __init__(self, owner: NativeDecode, hidden: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                 cos: torch.Tensor, sin: torch.Tensor) -> None:
        cfg = owner.cfg
        self.owner = owner
        self.hidden = hidden.contiguous()
        rows, hid = self.hidden.shape
        self.rows = rows
        group = cfg.num_heads // cfg.num_kv_heads
        qkv_n = cfg.q_size + 2 * cfg.kv_size
        attn_work = rows * (3 * hid + qkv_n + cfg.q_size) + group * (meta.max_seq_len + 16)
        mlp_work = rows * (3 * hid + 3 * cfg.intermediate_size)
        self.work = torch.empty(max(attn_work, mlp_work), dtype=torch.float32)
        self.positions = positions.contiguous()
        self.slots = meta.slot_mapping.contiguous()
        self.tables = meta.block_tables.contiguous()
        self.seq_lens = meta.seq_lens.contiguous()
        self._keep = (cos, sin)
        self._cos, self._sin = cos.data_ptr(), sin.data_ptr()
        self.scale = cfg.head_dim**-0.5

    def attention(self, index: int, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        cfg, (norm, qkv, o, _, _, _) = self.owner.cfg, self.owner.ptrs[index]
        rc = self.owner.lib.decode_attention_block(
            self.hidden.data_ptr(), self.rows, cfg.hidden_size, norm, cfg.rms_eps, qkv, o, self._cos, self._sin,
            self.positions.data_ptr(), self.slots.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
            self.tables.data_ptr(), self.tables.shape[1], self.seq_lens.data_ptr(), cfg.num_heads,
            cfg.num_kv_heads, cfg.head_dim, k_cache.shape[1], self.scale, self.work.data_ptr(),
        )
        if rc != 0:  # shapes were checked when the path was chosen: this is a bug, not a fallback case
            raise RuntimeError(f"native decode attention refused layer {index} (rc {rc})")

    def mlp(self, index: int) -> None:
        cfg, (_, _, _, norm, gate_up, down) = self.owner.cfg, self.owner.ptrs[index]
        rc = self.owner.lib.decode_mlp_block(
            self.hidden.data_ptr(), self.rows, cfg.hidden_size, norm, cfg.rms_eps, gate_up, down,
            cfg.intermediate_size, self.work.data_ptr(),
        )
        if rc != 0:
            raise RuntimeError(f"native decode MLP refused layer {index} (rc {rc})")
