"""A host-memory tier for evicted KV blocks: copied out on eviction, copied back on a later prefix hit.

Blocks are kept by their prefix key in a fixed host buffer (pinned when the device is a GPU); when it is
full the least recently stored block is dropped. Each copy is timed by the caller.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from llmtrace.backend.engine.kv_cache import KVCache


class HostTier:
    def __init__(self, capacity_blocks: int, kv: KVCache) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        first_k = kv.layers[0][0]
        shape = (capacity_blocks, len(kv.layers), *first_k.shape[1:])
        pin = first_k.device.type == "cuda"
        self._k = torch.empty(shape, dtype=kv.dtype, pin_memory=pin)
        self._v = torch.empty(shape, dtype=kv.dtype, pin_memory=pin)
        self._kv = kv
        self.capacity = capacity_blocks
        self._slots: OrderedDict[int, int] = OrderedDict()  # key -> slot, oldest first
        self._free_slots = list(range(capacity_blocks - 1, -1, -1))
        self.bytes_per_block = kv.bytes_per_block

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: int) -> bool:
        return key in self._slots

    def store(self, key: int, block_id: int) -> int:
        """Copy a device block out; returns bytes copied (0 when it was already there)."""
        if key in self._slots:
            self._slots.move_to_end(key)
            return 0
        if not self._free_slots:
            _, slot = self._slots.popitem(last=False)
            self._free_slots.append(slot)
        slot = self._free_slots.pop()
        self._kv.read_block(block_id, self._k[slot], self._v[slot])
        self._slots[key] = slot
        return self.bytes_per_block

    def restore(self, key: int, block_id: int) -> int:
        """Copy a block back into device block ``block_id`` and release its host slot; returns bytes."""
        slot = self._slots.pop(key)
        self._kv.write_block(block_id, self._k[slot], self._v[slot])
        self._free_slots.append(slot)
        return self.bytes_per_block
