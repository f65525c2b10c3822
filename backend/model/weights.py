"""The weights of a Llama model, loaded from GGUF or drawn at random for tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from llmtrace.backend.model.config import ModelConfig
from llmtrace.backend.model.gguf_reader import GGUFModelFile, Q8_0Parts
from llmtrace.backend.model.linear import Linear, concat_q4

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype must be float32 or bfloat16, got {dtype}")
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}") from None


@dataclass(slots=True)
class LayerWeights:
    attn_norm: torch.Tensor  # [hidden]
    qkv: Linear  # fused Q, K, V projections: [q_size + 2 * kv_size, hidden]
    o: Linear  # [hidden, q_size]
    ffn_norm: torch.Tensor  # [hidden]
    gate_up: Linear  # fused gate and up projections: [2 * intermediate, hidden]
    down: Linear  # [hidden, intermediate]


@dataclass(slots=True)
class LlamaWeights:
    embedding: torch.Tensor  # [vocab, hidden]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab, hidden]; the embedding itself when tied
    source: str  # what the weights came from, for the trace ("gguf:<path>" or "random:<seed>")
    quantization: str  # e.g. "Q4_1", "F32", "random"
    lm_head_q8: Q8_0Parts | None = None  # the LM head's exact Q8_0 codes (int4 decode only): its int8 decode path


def load_gguf_weights(gguf: GGUFModelFile, dtype: torch.dtype, int4: bool | None = None,
                      wide: torch.dtype | None = None, int_gemm: bool = False) -> LlamaWeights:
    """Dequantize every tensor to ``dtype`` (the layers' matrices to ``wide`` where given: float32 weights for
    a bfloat16 model's prefill on a CPU without bfloat16 dot products); keep the Q4_1 (and the head's Q8_0)
    codes too for the int4 decode path when ``int4`` (None: for bfloat16 only, so a float32 model is the
    plain reference); ``int_gemm``: the layers' matrices also as the integer prefill kernel's codes."""
    cfg = gguf.config
    codes = dtype == torch.bfloat16 if int4 is None else int4
    wide = wide or dtype

    def dense(name: str, to: torch.dtype = dtype) -> torch.Tensor:
        return torch.from_numpy(gguf.tensor(name)).to(to)

    def fused(names: list[str]) -> Linear:
        weight = torch.cat([dense(n, wide) for n in names])
        q4 = concat_q4([gguf.q4_1_parts(n) for n in names]) if codes else None
        return Linear(weight, q4, act_dtype=dtype, int_gemm=int_gemm)

    layers = []
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        layers.append(
            LayerWeights(
                attn_norm=dense(p + "attn_norm.weight").float(),
                qkv=fused([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]),
                o=fused([p + "attn_output.weight"]),
                ffn_norm=dense(p + "ffn_norm.weight").float(),
                gate_up=fused([p + "ffn_gate.weight", p + "ffn_up.weight"]),
                down=fused([p + "ffn_down.weight"]),
            )
        )
    embedding = dense("token_embd.weight")
    lm_head = embedding if cfg.tie_word_embeddings else dense("output.weight")
    return LlamaWeights(
        embedding=embedding,
        layers=layers,
        final_norm=dense("output_norm.weight").float(),
        lm_head=lm_head,
        source=f"gguf:{gguf.path}",
        quantization=gguf.tensor_type("blk.0.attn_q.weight"),
        lm_head_q8=gguf.q8_0_parts("token_embd.weight" if cfg.tie_word_embeddings else "output.weight")
        if codes else None,
    )


def random_weights(cfg: ModelConfig, dtype: torch.dtype, seed: int = 0,
                   wide: torch.dtype | None = None, int_gemm: bool = False) -> LlamaWeights:
    """Random weights of the right shapes; deterministic for a seed (tests and the tiny model); the layers'
    matrices in ``wide`` where given, and as integer kernel codes with ``int_gemm`` (as ``load_gguf_weights``)."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = 0.02, to: torch.dtype = dtype) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).to(to)

    def linear(*shape: int, std: float) -> Linear:
        return Linear(normal(*shape, std=std, to=wide or dtype), act_dtype=dtype, int_gemm=int_gemm)

    def norm_weight() -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(cfg.hidden_size, generator=gen)

    h, inter = cfg.hidden_size, cfg.intermediate_size
    layers = [
        LayerWeights(
            attn_norm=norm_weight(),
            qkv=linear(cfg.q_size + 2 * cfg.kv_size, h, std=h**-0.5),
            o=linear(h, cfg.q_size, std=cfg.q_size**-0.5),
            ffn_norm=norm_weight(),
            gate_up=linear(2 * inter, h, std=h**-0.5),
            down=linear(h, inter, std=inter**-0.5),
        )
        for _ in range(cfg.num_layers)
    ]
    embedding = normal(cfg.vocab_size, h, std=1.0)
    lm_head = embedding if cfg.tie_word_embeddings else normal(cfg.vocab_size, h)
    return LlamaWeights(
        embedding=embedding,
        layers=layers,
        final_norm=norm_weight(),
        lm_head=lm_head,
        source=f"random:{seed}",
        quantization="random",
    )


def open_gguf(path: str | Path) -> GGUFModelFile:
    return GGUFModelFile(path)
