"""The reference attention backend: plain torch over the paged KV cache (runs anywhere).

Three paths, picked per step from host-side lengths (no device sync):
- decode (one query token per sequence): with a bfloat16 cache on a CPU with AVX-512, the native kernel
  (``backend/model/cpu_native``) reads each sequence's pages in place and does scores, softmax and the
  weighted sum in float32 in one call (~6x faster at batch 1 than the matmul path: no gather, no
  transposed copies). Otherwise all sequences at once — gather their blocks into a padded
  ``[batch, kv_len, kv_heads, head_dim]`` view and use grouped batched matmuls with a float32 softmax.
  For one-token queries this beats torch's fused SDPA on CPU by a wide margin.
- prefill chunks: one sequence at a time through ``scaled_dot_product_attention`` with a causal mask
  offset by the cached prefix.
- batch-invariant mode: every sequence alone, queries in fixed-size tiles and keys in fixed-size chunks,
  accumulated in a fixed order, so a token's result never depends on what else shares the step (nor on
  where its prefill chunk happens to start).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
import torch.nn.functional as F

from llmtrace.backend.kernels.interface import AttentionMetadata
from llmtrace.backend.model import cpu_native

QUERY_TILE = 8
KEY_CHUNK = 128


@dataclass(frozen=True, slots=True)
class _Plan:
    flat: torch.Tensor  # int64 block ids, [batch * num_blocks]
    padded: int  # gathered length (whole blocks)
    length: int  # length to keep (== padded unless a lone sequence's padding is cut)
    mask: torch.Tensor | None  # float32 [batch, 1, 1, padded], -inf past each sequence's end


class TorchPagedAttention:
    """Causal attention over the paged cache; ``invariant`` selects the batch-invariant path."""

    name = "torch"

    def __init__(self, invariant: bool = False) -> None:
        self.invariant = invariant
        # the native decode kernel serves bfloat16 caches where it builds (None: the matmul path everywhere)
        self.native = None if invariant or cpu_native.load() is None else cpu_native
        # which code path serves which kind of query (recorded on forward.attention)
        native = "" if self.native is None else "decode_bfloat16=native_paged," + (
            "prefill_bfloat16=native_paged," if cpu_native.has_bf16_dot() else "prefill_bfloat16=native_paged_float32,")
        # float32 caches (a CPU without bfloat16 dot products): the AVX2 paged decode kernel where it builds
        self.native_f32 = not invariant and cpu_native.avx2_library() is not None
        # bfloat16 prefill attention on a CPU without bfloat16 dot products where the native kernel does not serve
        # (no library, another head size): torch's CPU SDPA multiplies bfloat16 blocks through widened products,
        # slower than widening q/k/v once and running it in float32 (1,000 tokens, 9 heads, one Xeon core: 21 ->
        # 17 ms a layer)
        self.widen_prefill = not invariant and not cpu_native.has_bf16_dot()
        native += "prefill_bfloat16_fallback=sdpa_float32," if self.widen_prefill else ""
        native += "decode_float32=native_paged," if self.native_f32 else ""
        self.kernel_path = (
            "all=invariant_tiles" if invariant
            else f"{native}decode=grouped_matmul,prefill=sdpa_causal,prefill_after_cache=grouped_matmul"
        )
        self._plan_key: tuple[int, tuple[int, ...]] | None = None
        self._plan: _Plan | None = None
        self._meta_ref: AttentionMetadata | None = None

    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        seq_lens = meta.seq_lens_list
        query_lens = meta.query_lens_list
        if not seq_lens or not query_lens:
            raise ValueError("the torch backend needs host copies of seq_lens and query lengths in the metadata")
        if self.invariant:
            return self._invariant(q, k_cache, v_cache, meta, scale)
        if meta.max_query_len == 1:
            return self._decode(q, k_cache, v_cache, meta, scale, list(range(len(seq_lens))))
        out = torch.empty_like(q)
        starts = list(accumulate(query_lens, initial=0))  # first query row of each sequence
        decodes = [i for i, n in enumerate(query_lens) if n == 1]
        if decodes:
            token_index = torch.tensor([starts[i] for i in decodes], dtype=torch.long, device=q.device)
            sub = self._decode(q.index_select(0, token_index), k_cache, v_cache, meta, scale, decodes)
            out.index_copy_(0, token_index, sub)
        for i, n in enumerate(query_lens):
            if n > 1:
                start = starts[i]
                out[start : start + n] = self._prefill(q[start : start + n], k_cache, v_cache, meta, i, scale)
        return out

    # paths --------------------------------------------------------------------------------------------

    def _decode(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        rows: list[int],
    ) -> torch.Tensor:
        """One query token for each sequence in ``rows``: the native kernel, else batched gather + grouped
        matmuls."""
        if self.native is not None and k_cache.dtype == torch.bfloat16:
            index = None if len(rows) == meta.block_tables.shape[0] else self._rows_index(rows)
            max_len = max(meta.seq_lens_list[i] for i in rows)
            out = self.native.paged_decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, index, max_len,
                                           scale)
            if out is not None:
                return out
        if self.native_f32 and k_cache.dtype == torch.float32:  # a float32 model: the AVX2 kernel, pages in place
            index = None if len(rows) == meta.block_tables.shape[0] else self._rows_index(rows)
            max_len = max(meta.seq_lens_list[i] for i in rows)
            out = cpu_native.paged_decode_f32(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, index, max_len,
                                              scale)
            if out is not None:
                return out
        batch, heads, dim = q.shape
        kv_heads = k_cache.shape[2]
        group = heads // kv_heads
        plan = self._decode_plan(meta, rows, k_cache.shape[1], q.device)
        k = _gather_blocks(k_cache, plan.flat).view(batch, plan.padded, kv_heads, dim)
        v = _gather_blocks(v_cache, plan.flat).view(batch, plan.padded, kv_heads, dim)
        if plan.length != plan.padded:  # one sequence: cut the padding instead of masking it
            k, v = k[:, : plan.length], v[:, : plan.length]
        # [B, L, KVH, D] -> [B, KVH, L, D], copied: a CPU matmul over the strided view copies it anyway,
        # and more slowly
        k = k.transpose(1, 2).contiguous()
        v = v.transpose(1, 2).contiguous()
        scores = torch.matmul((q * scale).view(batch, kv_heads, group, dim), k.transpose(-1, -2))
        if plan.mask is not None:
            scores = scores + plan.mask  # -inf past each sequence's end (float32)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        return torch.matmul(probs, v).view(batch, heads, dim)

    def _rows_index(self, rows: list[int]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long)

    def _decode_plan(self, meta: AttentionMetadata, rows: list[int], block_size: int, device: torch.device) -> _Plan:
        """Gather indices and padding mask of a decode batch, built once per step and reused by every layer."""
        key = (id(meta), tuple(rows))
        if self._plan_key == key and self._plan is not None:
            return self._plan
        lens = [meta.seq_lens_list[i] for i in rows]
        max_len = max(lens)
        num_blocks = -(-max_len // block_size)
        tables = meta.block_tables[:, :num_blocks]
        if len(rows) != meta.block_tables.shape[0]:
            tables = tables.index_select(0, torch.tensor(rows, dtype=torch.long, device=device))
        flat = tables.reshape(-1).long()  # int64 index: advanced indexing with int32 takes a slow path
        padded = num_blocks * block_size
        mask = None
        length = padded
        if len(rows) == 1:
            length = max_len
        elif min(lens) != padded:
            lens_t = torch.tensor(lens, device=device)
            beyond = torch.arange(padded, device=device)[None, :] >= lens_t[:, None]
            mask = torch.zeros(len(rows), 1, 1, padded, device=device)
            mask.masked_fill_(beyond[:, None, None, :], float("-inf"))
        self._plan_key, self._plan = key, _Plan(flat, padded, length, mask)
        self._meta_ref = meta  # keep the metadata alive so its id cannot be reused while the plan is cached
        return self._plan

    def _gather(self, cache: torch.Tensor, meta: AttentionMetadata, i: int) -> torch.Tensor:
        """One sequence's keys or values as ``[kv_len, kv_heads, head_dim]``."""
        length = meta.seq_lens_list[i]
        block_size = cache.shape[1]
        table = meta.block_tables[i, : -(-length // block_size)].long()
        return _gather_blocks(cache, table).view(-1, cache.shape[2], cache.shape[3])[:length]

    def _prefill(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, i: int, scale: float
    ) -> torch.Tensor:
        n = q.shape[0]
        length = meta.seq_lens_list[i]
        if self.native is not None and k_cache.dtype == torch.bfloat16:  # pages read in place, causal rows only
            out = self.native.paged_prefill(q, k_cache, v_cache, meta.block_tables[i], length, scale)
            if out is not None:
                return out
        k = self._gather(k_cache, meta, i).transpose(0, 1)
        v = self._gather(v_cache, meta, i).transpose(0, 1)
        if self.widen_prefill and q.dtype == torch.bfloat16 and q.device.type == "cpu":  # see __init__: float32 arithmetic, one rounding
            return self._prefill_math(q.float(), k.float(), v.float(), n, length, scale).to(q.dtype)
        return self._prefill_math(q, k, v, n, length, scale)

    def _prefill_math(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int, length: int,
                      scale: float) -> torch.Tensor:
        """``q: [n, H, D]`` over one sequence's gathered ``k``/``v: [KVH, length, D]``."""
        if n == length:  # nothing cached before this chunk: torch's fused causal kernel
            # 4-D inputs: with 3-D ones torch's CPU SDPA drops to its slow math path
            out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k[None], v[None], is_causal=True,
                                                 scale=scale, enable_gqa=True)
            return out[0].transpose(0, 1)
        # queries after a cached prefix: SDPA with an explicit mask is ~3x slower on CPU than grouped matmuls
        kv_heads, dim = k.shape[0], k.shape[2]
        group = q.shape[1] // kv_heads
        qg = (q * scale).view(n, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(kv_heads, group * n, dim)
        scores = torch.matmul(qg, k.contiguous().transpose(1, 2)).view(kv_heads, group, n, length)
        scores = scores.masked_fill(~causal_mask(n, length, q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype).view(kv_heads, group * n, length)
        out = torch.matmul(probs, v.contiguous())  # [KVH, G * n, D]
        return out.view(kv_heads, group, n, dim).permute(2, 0, 1, 3).reshape(n, kv_heads * group, dim)

    def _invariant(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        start = 0
        for i, n in enumerate(meta.query_lens_list):
            k = self._gather(k_cache, meta, i)
            v = self._gather(v_cache, meta, i)
            length = k.shape[0]
            for t0 in range(0, n, QUERY_TILE):
                t1 = min(t0 + QUERY_TILE, n)
                out[start + t0 : start + t1] = invariant_tile(
                    q[start + t0 : start + t1], k, v, first_position=length - n + t0, scale=scale
                )
            start += n
        return out


def _gather_blocks(cache: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
    """``cache[block_ids]`` through a 2-D view: row gathers of whole blocks are ~10x faster in bfloat16
    than ``index_select`` on the 4-D tensor."""
    return cache.view(cache.shape[0], -1).index_select(0, block_ids)


def causal_mask(num_queries: int, kv_len: int, device: torch.device) -> torch.Tensor:
    """Boolean ``[num_queries, kv_len]``: query t (at position kv_len - num_queries + t) sees keys <= it."""
    positions = torch.arange(kv_len - num_queries, kv_len, device=device)
    return torch.arange(kv_len, device=device)[None, :] <= positions[:, None]


def invariant_tile(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first_position: int, scale: float) -> torch.Tensor:
    """Attention for up to QUERY_TILE consecutive queries with fixed shapes and a fixed summation order.

    ``q: [n, H, D]`` at positions ``first_position ..``; ``k, v: [L, KVH, D]``. Queries are padded to the
    tile, keys to whole chunks; masked scores are exactly zero after ``exp`` so the extra chunks a later
    query needs add exact zeros to an earlier query's sums.
    """
    n, heads, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    visible = first_position + n  # keys this tile can see
    chunks = -(-visible // KEY_CHUNK)
    padded = chunks * KEY_CHUNK
    qp = q.new_zeros(QUERY_TILE, heads, dim)
    qp[:n] = q
    kp = k.new_zeros(padded, kv_heads, dim)
    kp[: min(padded, k.shape[0])] = k[:padded]
    vp = v.new_zeros(padded, kv_heads, dim)
    vp[: min(padded, v.shape[0])] = v[:padded]
    qg = qp.view(QUERY_TILE, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(kv_heads, group * QUERY_TILE, dim)
    kt = kp.permute(1, 2, 0)  # [KVH, D, padded]
    vt = vp.transpose(0, 1)  # [KVH, padded, D]
    scores = torch.cat(
        [torch.matmul(qg, kt[:, :, c * KEY_CHUNK : (c + 1) * KEY_CHUNK]) for c in range(chunks)], dim=-1
    ).float() * scale
    positions = first_position + torch.arange(QUERY_TILE, device=q.device)
    mask = torch.arange(padded, device=q.device)[None, :] > positions[:, None]  # [TILE, padded]
    scores = scores.view(kv_heads, group, QUERY_TILE, padded).masked_fill(mask, float("-inf"))
    scores = scores.view(kv_heads, group * QUERY_TILE, padded)
    peak = scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores - peak)
    total = torch.zeros_like(peak)
    acc = torch.zeros(kv_heads, group * QUERY_TILE, dim, dtype=torch.float32, device=q.device)
    for c in range(chunks):
        w = weights[:, :, c * KEY_CHUNK : (c + 1) * KEY_CHUNK]
        total += w.sum(dim=-1, keepdim=True)
        acc += torch.matmul(w, vt[:, c * KEY_CHUNK : (c + 1) * KEY_CHUNK].float())
    out = (acc / total).to(q.dtype)  # [KVH, G*TILE, D]
    return out.view(kv_heads, group, QUERY_TILE, dim).permute(2, 0, 1, 3).reshape(QUERY_TILE, heads, dim)[:n]
