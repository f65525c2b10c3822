"""The pool of fixed-size KV blocks: reference counts and the two kinds of unused block.

A block with no reader is either *free* (holds nothing worth keeping) or *evictable* (it holds a full,
hashed block the prefix cache can still hand out; eviction turns it free). Blocks with readers are in use.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None  # set once the block is full and registered in the prefix cache
    parent_hash: int | None = None
    depth: int = 0  # position of the block in its sequence (0 = first)
    last_access_ns: int = 0
    hits: int = 0  # times the prefix cache handed it out
    priority: int = 0  # highest priority among the requests that used it
    cached_children: int = 0  # hashed blocks whose parent this is (leaf-first eviction)


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))
        self._evictable: dict[int, Block] = {}

    @property
    def num_free(self) -> int:
        """Blocks holding nothing."""
        return len(self._free)

    @property
    def num_evictable(self) -> int:
        return len(self._evictable)

    @property
    def num_available(self) -> int:
        """Blocks an allocation can get, evicting cached ones if it must."""
        return len(self._free) + len(self._evictable)

    @property
    def num_in_use(self) -> int:
        return self.num_blocks - self.num_available

    def utilization(self) -> float:
        return self.num_in_use / self.num_blocks

    def fill_level(self) -> float:
        """Share of the pool holding something (in use or cached)."""
        return 1.0 - len(self._free) / self.num_blocks

    def evictable(self) -> list[Block]:
        return list(self._evictable.values())

    def take_free(self) -> Block:
        """A free block with one reference. Raises RuntimeError when none is free (evict first)."""
        if not self._free:
            raise RuntimeError("no free KV block (evict a cached one first)")
        block = self.blocks[self._free.popleft()]
        block.ref_count = 1
        block.hits = 0
        return block

    def incref(self, block: Block) -> None:
        if block.ref_count == 0:
            if block.block_hash is None:
                raise RuntimeError(f"block {block.block_id} is free; only cached blocks can be shared")
            del self._evictable[block.block_id]
        block.ref_count += 1

    def decref(self, block: Block) -> None:
        if block.ref_count <= 0:
            raise RuntimeError(f"block {block.block_id} released more often than taken")
        block.ref_count -= 1
        if block.ref_count == 0:
            if block.block_hash is None:
                self._reset(block)
                self._free.append(block.block_id)
            else:
                self._evictable[block.block_id] = block

    def drop(self, block: Block) -> None:
        """Evict a cached, unused block: it becomes free (the caller unregisters its hash first)."""
        if self._evictable.pop(block.block_id, None) is None:
            raise RuntimeError(f"block {block.block_id} is not evictable")
        self._reset(block)
        self._free.append(block.block_id)

    @staticmethod
    def _reset(block: Block) -> None:
        block.block_hash = None
        block.parent_hash = None
        block.cached_children = 0
        block.hits = 0
        block.priority = 0
