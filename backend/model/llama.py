"""The Llama forward pass: RMSNorm, rotary positions, grouped-query attention, SwiGLU, tied LM head.

``forward`` runs a flat batch of tokens from many sequences over the paged KV cache through an attention
backend; ``forward_dense`` is the plain reference (one sequence, no cache) that tests compare against.
Both can stop after the first ``num_layers`` layers (self-drafting uses the shallow model).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from llmtrace.backend.kernels.interface import AttentionBackend, AttentionMetadata, write_kv
from llmtrace.backend.model import cpu_gemm, cpu_native
from llmtrace.backend.model.compute_path import ComputePath
from llmtrace.backend.model.config import ModelConfig, tiny_config
from llmtrace.backend.model.forward_clock import ForwardClock
from llmtrace.backend.model.gguf_reader import GGUFModelFile
from llmtrace.backend.model.linear import INVARIANT_TILE, Linear
from llmtrace.backend.model.native_decode import NativeDecode
from llmtrace.backend.model.weights import (
    LayerWeights,
    LlamaWeights,
    load_gguf_weights,
    random_weights,
    resolve_dtype,
)


class LlamaModel:
    """Weights plus the arithmetic; holds no per-request state (the KV cache belongs to the engine)."""

    def __init__(self, config: ModelConfig, weights: LlamaWeights, dtype: torch.dtype, path: Path | None = None,
                 compute_path: ComputePath | None = None):
        self.config = config
        self.weights = weights
        self.dtype = dtype
        self.path = path
        self.device = weights.embedding.device
        # how this model was asked to compute (the engine records it); built by hand: the dtype given
        self.compute_path = compute_path or ComputePath(
            str(self.device), dtype, weights.lm_head_q8 is not None, "dtype given to the model", None)
        half = config.head_dim // 2
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
        self._rope_len = 0
        self._inv_freq = inv_freq
        self._cos = torch.empty(0)
        self._sin = torch.empty(0)
        self._ensure_rope(config.max_position)
        self.lm_head = Linear(weights.lm_head, q8=weights.lm_head_q8)
        # the fused native decode layers (bfloat16 on a CPU with the native library), else None
        self.native_decode = NativeDecode.build(config, weights.layers, dtype) if self.device.type == "cpu" else None
        # bfloat16 row kernels (norm, SiLU-and-product) for the torch-op steps (prefill, mixed, drafts)
        self._native_rows = dtype == torch.bfloat16 and self.device.type == "cpu" and cpu_native.load() is not None

    # construction -----------------------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path: str | Path, dtype: str | torch.dtype = "float32") -> LlamaModel:
        return cls.from_gguf_file(GGUFModelFile(path), dtype)

    @classmethod
    def from_gguf_file(cls, gguf: GGUFModelFile, dtype: str | torch.dtype = "float32") -> LlamaModel:
        torch_dtype = resolve_dtype(dtype)
        return cls(gguf.config, load_gguf_weights(gguf, torch_dtype), torch_dtype, path=gguf.path)

    @classmethod
    def from_gguf_path(cls, gguf: GGUFModelFile, compute: ComputePath) -> LlamaModel:
        """The model as ``compute`` says (its dtype; the int4 decode codes kept or not)."""
        weights = load_gguf_weights(gguf, compute.dtype, int4=compute.int4_decode, wide=compute.prefill_dtype,
                                    int_gemm=bool(compute.prefill_gemm))
        return cls(gguf.config, weights, compute.dtype, path=gguf.path, compute_path=compute)

    def path_labels(self) -> tuple[str, str]:
        """(prefill, decode): the arithmetic that computes each phase, as recorded on the forward stages."""
        attention = "sdpa"
        if self.device.type != "cpu":
            attention = self.device.type
        elif self.dtype == torch.bfloat16 and cpu_native.load() is not None:  # float32 products without BF16
            attention = "native_bf16_attention" if cpu_native.has_bf16_dot() else "native_f32_attention"
        layer = self.weights.layers[0] if self.weights.layers else None
        # what the layers hold, not what was asked for: the integer kernel's codes only where it was built
        gemm = cpu_gemm.LABEL if layer is not None and layer.qkv.wide_int is not None else self.compute_path.short
        prefill = f"{gemm}_gemm+{attention}"
        if self.native_decode is not None:
            decode = "native_fused_q4"
        elif layer is not None and layer.qkv.native is not None:
            decode = "native_q4_gemv"
        elif layer is not None and layer.qkv.int4_weight is not None:
            decode = "int4" if self.dtype == torch.bfloat16 else "int4_bf16_rows"
        else:
            decode = f"{self.compute_path.short}_dense"
        return prefill, decode

    @classmethod
    def tiny(cls, dtype: str | torch.dtype = "float32", seed: int = 0, wide: torch.dtype | None = None,
             int_gemm: bool = False) -> LlamaModel:
        """Random tiny weights; ``wide``: the layers' matrices in that dtype (a compute path's prefill dtype);
        ``int_gemm``: also as the integer prefill kernel's codes."""
        cfg = tiny_config()
        torch_dtype = resolve_dtype(dtype)
        return cls(cfg, random_weights(cfg, torch_dtype, seed, wide, int_gemm), torch_dtype)

    def to(self, device: str | torch.device) -> LlamaModel:
        """A copy of the model on ``device`` (off the CPU the int4 path is dropped: its kernel is CPU-only)."""
        device = torch.device(device)
        if device == self.device:
            return self

        def move(lin: Linear) -> Linear:
            return Linear(lin.weight.to(device, self.dtype))  # off the CPU the model's dtype throughout

        w = self.weights
        layers = [
            LayerWeights(lw.attn_norm.to(device), move(lw.qkv), move(lw.o), lw.ffn_norm.to(device),
                         move(lw.gate_up), move(lw.down))
            for lw in w.layers
        ]
        embedding = w.embedding.to(device)
        lm_head = embedding if w.lm_head is w.embedding else w.lm_head.to(device)
        moved = LlamaWeights(embedding, layers, w.final_norm.to(device), lm_head, w.source, w.quantization)
        path = ComputePath(str(device), self.dtype, False, f"{self.compute_path.reason}; moved to {device}", None)
        return LlamaModel(self.config, moved, self.dtype, self.path, path)

    def _ensure_rope(self, length: int) -> None:
        """Cos/sin tables (float32) for positions below ``length``; grown on demand past the trained context."""
        if length <= self._rope_len:
            return
        angles = torch.outer(torch.arange(length, dtype=torch.float64), self._inv_freq)
        self._cos = torch.cos(angles).float().to(self.device)
        self._sin = torch.sin(angles).float().to(self.device)
        self._rope_len = length

    # pieces -----------------------------------------------------------------------------------------------

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """In float32 whatever the model dtype (as the reference implementation does), then cast back."""
        eps = self.config.rms_eps
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), weight, eps)
        if self._native_rows:  # the same float32 arithmetic in one pass (each row alone: batch-invariant too)
            out = cpu_native.rms_norm_rows(x, weight, eps)
            if out is not None:
                return out
        return F.rms_norm(x.float(), (x.shape[-1],), weight, eps).to(x.dtype)

    def _rms_norm_tiled(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # a lone row's mean may be split across threads; fixed row tiles keep its reduction order fixed
        rows = x.shape[0]
        pad = (-rows) % INVARIANT_TILE
        xp = torch.cat([x, x.new_zeros(pad, x.shape[1])]) if pad else x
        return torch.cat([self._rms_norm(t, weight) for t in xp.split(INVARIANT_TILE)])[:rows]

    def _rope_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and signed ``sin`` as ``[n, 1, head_dim]`` in the model dtype for these positions."""
        cos = self._cos.index_select(0, positions)
        sin = self._sin.index_select(0, positions)
        cos2 = torch.cat([cos, cos], dim=-1).to(self.dtype)[:, None, :]
        sin2 = torch.cat([-sin, sin], dim=-1).to(self.dtype)[:, None, :]
        return cos2, sin2

    def _rope(self, x: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor) -> torch.Tensor:
        """Half-split rotary convention (the GGUF reader undid llama.cpp's interleaved row order):
        ``x * cos + rotate_half(x) * sin``, with the sign of ``rotate_half`` folded into ``sin2``."""
        return x * cos2 + x.roll(x.shape[-1] // 2, dims=-1) * sin2

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weights.embedding)

    def lm_head_logits(self, hidden: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        """Final norm + vocabulary projection, float32 ``[rows, vocab]``."""
        norm = self._rms_norm_tiled if invariant else self._rms_norm
        return self.lm_head(norm(hidden, self.weights.final_norm), invariant=invariant).float()

    # the paged, batched forward ---------------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        attention: AttentionBackend,
        logits_indices: torch.Tensor,
        *,
        num_layers: int | None = None,
        invariant: bool = False,
        clock: ForwardClock | None = None,
    ) -> torch.Tensor:
        """Logits (float32) at the flat token indices ``logits_indices`` after running every new token.

        ``input_ids``/``positions``: ``[num_tokens]``; the new keys/values are written to the cache slots in
        ``meta.slot_mapping`` before attention reads them.
        """
        cfg = self.config
        layers = self.weights.layers[: num_layers or cfg.num_layers]
        clock = clock or ForwardClock(self.device)
        t = clock.mark()
        hidden = self.embed(input_ids)
        clock.add("embedding", t)
        n = input_ids.shape[0]
        native = self.native_decode
        if native is not None and not native.applies(n, meta, attention, invariant, kv_caches[0][0].dtype):
            native = None
        t = clock.mark()
        self._ensure_rope(meta.max_seq_len)
        if native is not None:  # the fused layers read the float32 tables at each row's position
            step = native.step(hidden, positions, meta, self._cos, self._sin, kv_caches)
            clock.add("positional", t)
            for index in range(min(len(layers), len(kv_caches))):
                t = clock.mark()
                step.attention(index)
                clock.add("attention", t)
                t = clock.mark()
                step.mlp(index)
                clock.add("feed_forward", t)
            hidden = step.hidden
            t = clock.mark()
            logits = self.lm_head_logits(hidden.index_select(0, logits_indices), invariant)
            clock.add("lm_head", t)
            return logits
        # bfloat16 on a CPU: rotary in place on the QKV rows with the float32 tables (head size 64), checked
        # once for the forward (positions and tables are the same in every layer); the torch tables only
        # where that kernel does not run
        heads_qk = cfg.num_heads + cfg.num_kv_heads
        rope_native = (self._native_rows and cfg.head_dim == 64 and positions.device.type == "cpu"
                       and cpu_native.rope_applies(heads_qk, n, cfg.q_size + 2 * cfg.kv_size, positions,
                                                   self._cos, self._sin))
        tables = None if rope_native else self._rope_tables(positions)
        clock.add("positional", t)
        norm = self._rms_norm_tiled if invariant else self._rms_norm
        scale = cfg.head_dim**-0.5
        for layer, (k_cache, v_cache) in zip(layers, kv_caches, strict=False):
            t = clock.mark()
            x = norm(hidden, layer.attn_norm)
            qkv = layer.qkv(x, invariant)
            if rope_native and cpu_native.rope_rows(qkv, heads_qk, positions, self._cos, self._sin, checked=True):
                qk = qkv[:, : cfg.q_size + cfg.kv_size].view(n, heads_qk, cfg.head_dim)  # rotated in place
            else:  # rotate queries and keys in one go: [n, heads + kv_heads, head_dim]
                tables = tables or self._rope_tables(positions)
                qk = self._rope(qkv[:, : cfg.q_size + cfg.kv_size].view(n, heads_qk, cfg.head_dim), *tables)
            q, k = qk[:, : cfg.num_heads], qk[:, cfg.num_heads :]
            v = qkv[:, cfg.q_size + cfg.kv_size :].view(n, cfg.num_kv_heads, cfg.head_dim)
            write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            attn = attention.forward(q, k_cache, v_cache, meta, scale)
            hidden = hidden + layer.o(attn.reshape(n, cfg.q_size), invariant)
            clock.add("attention", t)
            t = clock.mark()
            hidden = hidden + self._mlp(norm(hidden, layer.ffn_norm), layer.gate_up, layer.down, invariant)
            clock.add("feed_forward", t)
        t = clock.mark()
        logits = self.lm_head_logits(hidden.index_select(0, logits_indices), invariant)
        clock.add("lm_head", t)
        return logits

    def _mlp(self, x: torch.Tensor, gate_up: Linear, down: Linear, invariant: bool) -> torch.Tensor:
        gu = gate_up(x, invariant)
        inter = gu.shape[-1] // 2
        act = cpu_native.silu_mul_rows(gu) if self._native_rows else None  # one pass, float32 inside
        return down(F.silu(gu[:, :inter]) * gu[:, inter:] if act is None else act, invariant)

    # the dense reference ----------------------------------------------------------------------------------

    @torch.no_grad()
    def forward_dense(
        self, input_ids: list[int] | torch.Tensor, num_layers: int | None = None, last_only: bool = False
    ) -> torch.Tensor:
        """Plain causal forward over one whole sequence, no cache, dense weights: float32 ``[T, vocab]``
        (``[1, vocab]`` with ``last_only``)."""
        cfg = self.config
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device)
        n = ids.shape[0]
        self._ensure_rope(n)
        cos2, sin2 = self._rope_tables(torch.arange(n, device=self.device))
        hidden = self.embed(ids)
        mask = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
        for layer in self.weights.layers[: num_layers or cfg.num_layers]:
            x = self._rms_norm(hidden, layer.attn_norm)
            qkv = layer.qkv.dense(x)
            q = self._rope(qkv[:, : cfg.q_size].view(n, cfg.num_heads, cfg.head_dim), cos2, sin2)
            k = self._rope(qkv[:, cfg.q_size : cfg.q_size + cfg.kv_size].view(n, cfg.num_kv_heads, cfg.head_dim),
                           cos2, sin2)
            v = qkv[:, cfg.q_size + cfg.kv_size :].view(n, cfg.num_kv_heads, cfg.head_dim)
            k = k.repeat_interleave(cfg.gqa_ratio, dim=1)
            v = v.repeat_interleave(cfg.gqa_ratio, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * cfg.head_dim**-0.5
            probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            attn = torch.einsum("hqk,khd->qhd", probs, v.float()).to(self.dtype)
            hidden = hidden + layer.o.dense(attn.reshape(n, cfg.q_size))
            x = self._rms_norm(hidden, layer.ffn_norm)
            gu = layer.gate_up.dense(x)
            inter = gu.shape[-1] // 2
            hidden = hidden + layer.down.dense(F.silu(gu[:, :inter]) * gu[:, inter:])
        if last_only:
            hidden = hidden[-1:]
        return F.linear(self._rms_norm(hidden, self.weights.final_norm), self.weights.lm_head).float()
