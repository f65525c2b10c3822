"""The paged KV cache tensors: per layer ``[num_blocks, block_size, num_kv_heads, head_dim]`` keys and values."""

from __future__ import annotations

import torch

from llmtrace.backend.model.config import ModelConfig


class KVCache:
    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str) -> None:
        shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(cfg.num_layers)
        ]
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.dtype = dtype
        self.element_size = torch.empty((), dtype=dtype).element_size()
        self.bytes_per_token = cfg.kv_bytes_per_token(self.element_size)
        self.bytes_per_block = self.bytes_per_token * block_size

    def read_block(self, block_id: int, out_k: torch.Tensor, out_v: torch.Tensor) -> None:
        """Copy one block of every layer into ``out_k``/``out_v`` (``[layers, block_size, kv_heads, head_dim]``)."""
        for i, (k, v) in enumerate(self.layers):
            out_k[i].copy_(k[block_id])
            out_v[i].copy_(v[block_id])

    def write_block(self, block_id: int, src_k: torch.Tensor, src_v: torch.Tensor) -> None:
        for i, (k, v) in enumerate(self.layers):
            k[block_id].copy_(src_k[i])
            v[block_id].copy_(src_v[i])
