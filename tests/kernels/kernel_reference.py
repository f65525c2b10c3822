"""Shared by the kernel tests: Triton set up for the CPU interpreter, dense float64 references, and
random paged-cache fixtures.

Why not a conftest.py: several test folders import helpers with ``from conftest import ...``, and a
conftest here would shadow theirs for every folder collected after this one.

``TRITON_INTERPRET`` is read when Triton decorates a kernel — including Triton's own standard library
at ``import triton`` — so it must be set before the first import. Importing this module (every kernel
test module does so first) sets it only while Triton and our kernel modules are imported, and the
autouse ``interpreter_flag`` fixture sets it again while a kernel test module runs; other test areas
never see it. If something imported Triton earlier in compiled mode, Triton's Python modules are dropped
and imported again under the interpreter. With a CUDA device nothing changes and the kernels run
compiled on the GPU.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU runs go through Triton's interpreter
ON_GPU = torch.cuda.is_available()
_KERNEL_MODULES = (
    "llmtrace.backend.kernels.triton_decode",
    "llmtrace.backend.kernels.triton_prefill",
    "llmtrace.backend.kernels.triton_norm_rotary",
    "llmtrace.backend.kernels.triton_attention",
)


class _Interpreting:
    """Set ``TRITON_INTERPRET=1`` for a while, then restore whatever was there."""

    def __enter__(self) -> None:
        self.saved = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = self.saved


def _interpreted() -> bool:
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(standard.zeros, InterpretedFunction)


def _load_under_interpreter() -> None:
    """Import Triton and our kernels in interpreter mode (nothing to do when Triton is missing)."""
    with _Interpreting():
        try:
            import triton  # noqa: F401
        except Exception:  # need_triton() reports it, per test module
            return
        if not _interpreted():
            # Imported earlier in compiled mode: drop the Python side (the C extension stays loaded).
            for name in list(sys.modules):
                top = name == "triton" or name.startswith("triton.")
                if (top and not name.startswith("triton._C")) or name in _KERNEL_MODULES:
                    del sys.modules[name]
            import triton  # noqa: F401,F811
        for name in _KERNEL_MODULES:
            __import__(name)


if not ON_GPU:
    _load_under_interpreter()


@pytest.fixture(autouse=True, scope="module")
def interpreter_flag() -> Iterator[None]:
    """Triton also reads the flag at call time (constexpr helpers), so keep it set during the tests.

    Import it into a test module to apply it there (autouse within that module).
    """
    if ON_GPU:
        yield
        return
    with _Interpreting():
        yield


TRITON_MISSING = "Triton is not installed; install the extra: pip install 'llmtrace-stages[gpu]'"


def need_triton() -> None:
    """Skip the calling test module, with the reason, when Triton cannot be imported."""
    pytest.importorskip("triton", reason=TRITON_MISSING)


@dataclass(slots=True)
class PagedBatch:
    """A batch laid out as the engine lays it out: scattered blocks, padded block tables."""

    q: torch.Tensor  # [tokens, heads, dim]
    k_cache: torch.Tensor  # [blocks, page, kv_heads, dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # int32 [batch, max_blocks], padded with 0
    seq_lens: list[int]
    query_lens: list[int]

    @property
    def query_start_loc(self) -> torch.Tensor:
        starts = [0]
        for n in self.query_lens:
            starts.append(starts[-1] + n)
        return torch.tensor(starts, dtype=torch.int32, device=self.q.device)

    @property
    def seq_lens_t(self) -> torch.Tensor:
        return torch.tensor(self.seq_lens, dtype=torch.int32, device=self.q.device)

    def metadata(self):  # noqa: ANN201 - AttentionMetadata, imported lazily like the kernels
        from llmtrace.backend.kernels.interface import AttentionMetadata

        slots = []
        page = self.k_cache.shape[1]
        for i, (length, n) in enumerate(zip(self.seq_lens, self.query_lens, strict=True)):
            for p in range(length - n, length):
                slots.append(int(self.block_tables[i, p // page]) * page + p % page)
        return AttentionMetadata(
            query_start_loc=self.query_start_loc,
            seq_lens=self.seq_lens_t,
            block_tables=self.block_tables,
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=self.q.device),
            max_query_len=max(self.query_lens),
            max_seq_len=max(self.seq_lens),
            seq_lens_list=tuple(self.seq_lens),
            query_lens_list=tuple(self.query_lens),
        )


def make_batch(
    seq_lens: list[int],
    query_lens: list[int],
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page: int,
    dtype: torch.dtype = torch.float32,
    device: str = DEVICE,
    seed: int = 0,
    spare_blocks: int = 3,
    fill: float = float("nan"),
) -> PagedBatch:
    """Random q and caches; each sequence gets randomly chosen, non-contiguous blocks.

    Every slot no sequence owns — the tail of a last block and the spare blocks — holds ``fill``
    (NaN by default), so a kernel that reads past a sequence's length, or through a padding entry of
    the block table, poisons its output instead of passing by luck. Block 0 is always a spare, which
    is what padding points at. (Backends that mask scores but still multiply the padded values need a
    finite ``fill``.)
    """
    gen = torch.Generator().manual_seed(seed)
    needed = [math.ceil(n / page) for n in seq_lens]
    num_blocks = sum(needed) + spare_blocks + 1
    order = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    tables = torch.zeros(len(seq_lens), max(needed), dtype=torch.int32)
    k_cache = torch.full((num_blocks, page, num_kv_heads, head_dim), fill)
    v_cache = torch.full_like(k_cache, fill)
    used = 0
    for i, (length, n_blocks) in enumerate(zip(seq_lens, needed, strict=True)):
        tables[i, :n_blocks] = torch.tensor(order[used : used + n_blocks], dtype=torch.int32)
        used += n_blocks
        for p in range(length):
            b, o = int(tables[i, p // page]), p % page
            k_cache[b, o] = torch.randn(num_kv_heads, head_dim, generator=gen)
            v_cache[b, o] = torch.randn(num_kv_heads, head_dim, generator=gen)
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen)
    return PagedBatch(
        q=q.to(device=device, dtype=dtype),
        k_cache=k_cache.to(device=device, dtype=dtype),
        v_cache=v_cache.to(device=device, dtype=dtype),
        block_tables=tables.to(device),
        seq_lens=list(seq_lens),
        query_lens=list(query_lens),
    )


def dense_attention(batch: PagedBatch, scale: float) -> torch.Tensor:
    """Float64 causal attention per sequence over its gathered K/V (no paging, no tiling)."""
    q = batch.q.double().cpu()
    k_cache = batch.k_cache.double().cpu()
    v_cache = batch.v_cache.double().cpu()
    page = k_cache.shape[1]
    heads, kv_heads = q.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    start = 0
    for i, (length, n) in enumerate(zip(batch.seq_lens, batch.query_lens, strict=True)):
        pos = torch.arange(length)
        blocks = batch.block_tables[i].cpu().long()[pos // page]
        k = k_cache[blocks, pos % page].repeat_interleave(heads // kv_heads, dim=1)  # [L, H, D]
        v = v_cache[blocks, pos % page].repeat_interleave(heads // kv_heads, dim=1)
        qi = q[start : start + n]
        scores = torch.einsum("thd,lhd->htl", qi, k) * scale
        q_pos = torch.arange(length - n, length)
        scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        out[start : start + n] = torch.einsum("htl,lhd->thd", scores.softmax(-1), v)
        start += n
    return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64."""
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    return float((out64 - ref64).norm() / ref64.norm())
