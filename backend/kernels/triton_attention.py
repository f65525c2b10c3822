"""``TritonPagedAttention``: the Triton attention backend over the paged KV cache.

It implements :class:`llmtrace.backend.kernels.interface.AttentionBackend`. A step whose sequences all
have one query token goes to the split-K decode kernel (:mod:`.triton_decode`); in a mixed step the
one-token sequences still go to the decode kernel and only the multi-token ones to the prefill/extend
kernel (:mod:`.triton_prefill`), so a decoding sequence gets the same, batch-invariant arithmetic
whatever it shares the step with.

Importing this module needs Triton but not CUDA; without Triton it raises an ``ImportError`` that says
how to get it, which is what backend selection checks.
"""

from __future__ import annotations

try:
    import triton  # noqa: F401  (imported for its error: the kernels below need it)
except Exception as exc:  # ImportError, or a broken install failing while it loads
    raise ImportError(
        "the Triton attention backend needs the 'triton' package (pip install 'llmtrace-stages[gpu]'); "
        f"importing it failed: {exc}"
    ) from exc

import torch

from llmtrace.backend.kernels.interface import AttentionMetadata, paged_shapes
from llmtrace.backend.kernels.triton_decode import DEFAULT_SPLIT_SIZE, paged_decode_attention
from llmtrace.backend.kernels.triton_prefill import paged_prefill_attention

MAX_HEAD_DIM = 256  # one head row must fit a program's registers alongside a KV tile
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return bool(triton.knobs.runtime.interpret)


def unsupported_reason(
    *,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
    sliding_window: int | None = None,
) -> str | None:
    """Why these kernels cannot run a model's attention, or None when they can.

    The reasons are short phrases meant for the ``forward.attention`` stage's recorded choice.
    """
    dev = torch.device(device)
    if dev.type != "cuda" and not interpreting():
        return "no GPU (Triton kernels run on CUDA, or on CPU only under TRITON_INTERPRET=1)"
    if head_dim > MAX_HEAD_DIM:
        return f"unsupported head size {head_dim} (max {MAX_HEAD_DIM})"
    if dtype not in SUPPORTED_DTYPES:
        return f"unsupported dtype {dtype}"
    if sliding_window is not None:
        return "sliding-window attention is not implemented in the Triton kernels"
    return None


class TritonPagedAttention:
    """Paged attention in Triton: split-K decode plus causal prefill/extend, fp32 accumulation.

    Default mode: one-token sequences use the split-K decode kernel, whose result for a sequence never
    depends on the rest of the batch (``split_size`` is fixed per instance, never chosen from the batch);
    longer ones use the prefill kernel, whose rows are also independent of the batch.

    ``invariant=True`` (the engine's batch-invariant mode) sends *every* sequence through the prefill
    kernel. Its per-row arithmetic is the same wherever a token sits — in a decode step, in a prefill
    chunk of any size, or recomputed after preemption — because KV tiles start at position 0 and the
    tiles past a row's causal horizon add exact zeros. (That a row's result does not depend on its
    place in a tile holds for GPU matrix units; ``benchmarks/gpu_kernels.py`` checks it on the device.
    Under the CPU interpreter only tile-aligned chunkings are bitwise.) The price is slower decode at long context: no
    split-K, so one program walks a sequence's whole KV for each KV head.

    Block sizes and warps left as None follow the per-dtype, per-head-size defaults of
    :func:`.triton_decode.decode_config` and :func:`.triton_prefill.prefill_config`; they never depend
    on the batch. Keep one instance per engine: other tile sizes change the low bits of results.
    """

    name = "triton"

    def __init__(
        self,
        *,
        invariant: bool = False,
        split_size: int = DEFAULT_SPLIT_SIZE,
        decode_block_n: int | None = None,
        prefill_block_m: int | None = None,
        prefill_block_n: int | None = None,
        num_warps: int | None = None,
    ) -> None:
        if decode_block_n is not None and (split_size < decode_block_n or split_size % decode_block_n):
            raise ValueError(f"split_size {split_size} must be a multiple of decode_block_n {decode_block_n}")
        self.invariant = invariant
        self.split_size = split_size
        self.decode_block_n = decode_block_n
        self.prefill_block_m = prefill_block_m
        self.prefill_block_n = prefill_block_n
        self.num_warps = num_warps

    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Return ``[num_tokens, num_heads, head_dim]`` causal attention over the paged cache."""
        paged_shapes(q, k_cache, v_cache)
        if q.device != k_cache.device or v_cache.device != k_cache.device:
            raise ValueError(f"q on {q.device} but the KV cache on {k_cache.device}")
        reason = unsupported_reason(head_dim=q.shape[2], dtype=k_cache.dtype, device=q.device)
        if reason is not None:
            raise ValueError(f"TritonPagedAttention cannot run here: {reason}")
        out = torch.empty_like(q)
        if q.shape[0] == 0:
            return out
        query_lens = meta.query_lens_list
        if not query_lens:
            # No host copy was supplied: read the lengths back (one device sync).
            query_lens = tuple(torch.diff(meta.query_start_loc).tolist())
        if self.invariant:
            decode_ids, extend_ids = [], [i for i, n in enumerate(query_lens) if n > 0]
        else:
            decode_ids = [i for i, n in enumerate(query_lens) if n == 1]
            extend_ids = [i for i, n in enumerate(query_lens) if n > 1]
        if decode_ids:
            all_decode = len(decode_ids) == len(query_lens)
            self._decode(q, k_cache, v_cache, meta, scale, out, None if all_decode else decode_ids)
        if extend_ids:
            all_extend = len(extend_ids) == len(query_lens)
            seq_ids = None if all_extend else self._ids(extend_ids, q.device)
            paged_prefill_attention(
                q,
                k_cache,
                v_cache,
                meta.block_tables,
                meta.seq_lens,
                meta.query_start_loc,
                scale,
                max_query_len=max(query_lens[i] for i in extend_ids),
                seq_ids=seq_ids,
                out=out,
                block_m=self.prefill_block_m,
                block_n=self.prefill_block_n,
                num_warps=self.num_warps,
            )
        return out

    def _decode(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        out: torch.Tensor,
        ids: list[int] | None,
    ) -> None:
        if ids is not None and meta.seq_lens_list:
            max_seq_len = max(meta.seq_lens_list[i] for i in ids)
        else:
            max_seq_len = meta.max_seq_len
        paged_decode_attention(
            q,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.seq_lens,
            scale,
            max_seq_len=max_seq_len,
            query_start_loc=meta.query_start_loc,
            seq_ids=None if ids is None else self._ids(ids, q.device),
            out=out,
            split_size=self.split_size,
            block_n=self.decode_block_n,
            num_warps=self.num_warps,
        )

    @staticmethod
    def _ids(ids: list[int], device: torch.device) -> torch.Tensor:
        host = torch.tensor(ids, dtype=torch.int32)
        if device.type == "cuda":
            # Pinned + non_blocking: a pageable copy would stall the host on the GPU's queue.
            return host.pin_memory().to(device, non_blocking=True)
        return host.to(device)
