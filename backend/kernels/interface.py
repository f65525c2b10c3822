"""The attention-backend interface: one ``forward`` over a paged KV cache.

Layout (shared by every backend and by the engine):
- ``k_cache`` / ``v_cache`` of one layer: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
- A token at logical position ``p`` of a sequence lives in block ``block_table[p // block_size]``
  at offset ``p % block_size``; its flat slot is ``block_id * block_size + offset``.
- One step processes a flat batch of query tokens ``q: [num_tokens, num_heads, head_dim]``; the
  tokens of sequence ``i`` are ``q[query_start_loc[i]:query_start_loc[i+1]]`` and sit at the
  *last* positions of that sequence (``seq_lens[i]`` already counts them), so a decode step has one
  query token per sequence and a chunked-prefill step has several. Attention is causal.
- The new tokens' K/V are written into the cache (``write_kv``) before ``forward`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    """Per-step description of the batch, built once per step by the model runner."""

    query_start_loc: torch.Tensor  # int32 [batch + 1], cumulative query lengths
    seq_lens: torch.Tensor  # int32 [batch], KV length of each sequence including this step's tokens
    block_tables: torch.Tensor  # int32 [batch, max_blocks_per_seq], padded with 0 past the used blocks
    slot_mapping: torch.Tensor  # int64 [num_tokens], flat cache slot of each new token
    max_query_len: int
    max_seq_len: int
    seq_lens_list: tuple[int, ...] = ()  # host copies, so backends need no device sync to loop
    query_lens_list: tuple[int, ...] = ()


class AttentionBackend(Protocol):
    """What every attention backend offers. ``name`` is recorded on ``forward.attention``."""

    name: str

    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Return ``[num_tokens, num_heads, head_dim]`` causal attention output over the paged cache."""
        ...


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Scatter this step's keys/values ``[num_tokens, num_kv_heads, head_dim]`` into their slots."""
    flat_k = k_cache.view(-1, k_cache.shape[2], k_cache.shape[3])
    flat_v = v_cache.view(-1, v_cache.shape[2], v_cache.shape[3])
    flat_k.index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    flat_v.index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def paged_shapes(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """Check ``q`` and the caches against the layout above; return ``(num_heads, head_dim, num_kv_heads, page)``.

    Raises ``ValueError`` when the ranks, the K/V cache shapes, the head size or the GQA grouping disagree.
    """
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError("q must be [tokens, heads, dim] and k/v caches [blocks, page, kv_heads, dim]")
    num_heads, head_dim = q.shape[1], q.shape[2]
    page, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if k_cache.shape[3] != head_dim or num_heads % num_kv_heads:
        raise ValueError(
            f"head_dim {head_dim} vs cache {k_cache.shape[3]}, heads {num_heads} vs kv {num_kv_heads}"
        )
    return num_heads, head_dim, num_kv_heads, page
