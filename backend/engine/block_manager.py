"""Gives sequences their KV blocks: prefix-cache hits first, then fresh blocks, evicting under pressure.

Check-then-act pairs (``can_admit``/``admit``, ``can_append``/``append_slots``) so the scheduler makes
every decision; this class only keeps the books. Everything it does for a sequence is charged to that
sequence's stats (blocks taken, evictions triggered, host-tier copies).
"""

from __future__ import annotations

import time

from llmtrace.backend.engine.block_pool import Block, BlockPool
from llmtrace.backend.engine.eviction import EvictionPolicy
from llmtrace.backend.engine.host_tier import HostTier
from llmtrace.backend.engine.prefix_cache import PrefixCache, chain_hashes, matchable_blocks, recorded_key
from llmtrace.backend.engine.sequence import Sequence
from llmtrace.tracer.registry import stage_ids as S


class BlockManager:
    def __init__(
        self,
        pool: BlockPool,
        policy: EvictionPolicy,
        *,
        watermark_blocks: int,
        prefix_cache: PrefixCache | None,
        host_tier: HostTier | None = None,
    ) -> None:
        self.pool = pool
        self.policy = policy
        self.watermark_blocks = watermark_blocks
        self.prefix_cache = prefix_cache
        self.host_tier = host_tier
        self.block_size = pool.block_size
        self.total_evicted = 0

    # prefix lookups ---------------------------------------------------------------------------------------

    def _keys(self, seq: Sequence) -> list[int]:
        full = len(seq.token_ids) // self.block_size
        if len(seq.block_keys) < full:
            seq.block_keys = chain_hashes(seq.token_ids, self.block_size, seq.block_keys)
        return seq.block_keys

    def longest_cached_prefix(self, token_ids: list[int]) -> int:
        """Tokens of ``token_ids`` a new request would find cached (device or host tier); changes nothing."""
        if self.prefix_cache is None:
            return 0
        hit = 0
        for key in chain_hashes(token_ids[: matchable_blocks(len(token_ids), self.block_size) * self.block_size],
                                self.block_size):
            if self.prefix_cache.get(key) is None and not (self.host_tier and key in self.host_tier):
                break
            hit += self.block_size
        return hit

    def match_prefix(self, seq: Sequence) -> int:
        """Attach the cached leading blocks of a sequence that has none yet; returns tokens now computed."""
        if seq.block_table:
            raise RuntimeError(f"{seq.request_id} already holds blocks")
        if self.prefix_cache is None:
            return 0
        start = time.time_ns()
        keys = self._keys(seq)[: matchable_blocks(seq.num_tokens, self.block_size)]
        now = time.monotonic_ns()
        for depth, key in enumerate(keys):
            block_id = self.prefix_cache.get(key)
            if block_id is not None:
                block = self.pool.blocks[block_id]
                self.pool.incref(block)
            elif self.host_tier is not None and key in self.host_tier and self.pool.num_available > self.watermark_blocks:
                block = self._fresh_block(seq)
                t0 = time.perf_counter_ns()
                copied = self.host_tier.restore(key, block.block_id)
                seq.stats.offload_ms += (time.perf_counter_ns() - t0) / 1e6
                seq.stats.offload_in += 1
                seq.stats.offload_bytes += copied
                self._register(block, key, keys[depth - 1] if depth else None, depth)
            else:
                break
            block.hits += 1
            block.last_access_ns = now
            block.priority = max(block.priority, seq.priority)
            seq.block_table.append(block)
        seq.num_registered_blocks = len(seq.block_table)
        hit = len(seq.block_table) * self.block_size
        if seq.stats.prefix_lookup_ns == (0, 0):  # first admission: what the pass found in the cache
            seq.stats.prefix_hit_tokens = hit
            seq.num_cached_tokens = hit
            seq.stats.prefix_key = recorded_key(keys[len(seq.block_table) - 1]) if seq.block_table else ""
            seq.stats.prefix_first_miss = hit if hit < seq.num_prompt_tokens else -1
            seq.stats.prefix_lookup_ns = (start, time.time_ns())
            seq.stats.window(S.CACHE_PREFIX_MATCH, start, seq.stats.prefix_lookup_ns[1])
            self.prefix_cache.count_lookup(seq.num_prompt_tokens, hit)
        return hit

    # allocation -------------------------------------------------------------------------------------------

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        need = -(-(seq.num_computed_tokens + num_new_tokens) // self.block_size)
        return max(need - len(seq.block_table), 0)

    def can_admit(self, num_blocks: int) -> bool:
        """Room for a new sequence's blocks while leaving the watermark free."""
        return self.pool.num_available - num_blocks >= self.watermark_blocks

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.pool.num_available

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Give ``seq`` the blocks to hold ``num_new_tokens`` more tokens (check ``can_append`` first)."""
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self._fresh_block(seq))
            seq.stats.blocks_allocated += 1
        self._keep_watermark(seq)
        seq.stats.peak_utilization = max(seq.stats.peak_utilization, self.pool.utilization())

    def _fresh_block(self, seq: Sequence) -> Block:
        if self.pool.num_free == 0:
            self._evict_one(seq)
        block = self.pool.take_free()
        block.depth = len(seq.block_table)
        block.priority = seq.priority
        block.last_access_ns = time.monotonic_ns()
        return block

    def _keep_watermark(self, seq: Sequence) -> None:
        """Below the watermark of free blocks, recycle cached ones until back above it."""
        while self.pool.num_free < self.watermark_blocks and self.pool.num_evictable:
            self._evict_one(seq)

    def _evict_one(self, seq: Sequence) -> None:
        victim = self.policy.pick(self.pool.evictable())
        key = victim.block_hash
        if key is not None:
            if self.host_tier is not None:
                t0 = time.perf_counter_ns()
                copied = self.host_tier.store(key, victim.block_id)
                seq.stats.offload_ms += (time.perf_counter_ns() - t0) / 1e6
                seq.stats.offload_out += 1 if copied else 0
                seq.stats.offload_bytes += copied
            if self.prefix_cache is not None:
                self.prefix_cache.remove(key)
            if victim.parent_hash is not None and self.prefix_cache is not None:
                parent_id = self.prefix_cache.get(victim.parent_hash)
                if parent_id is not None:
                    parent = self.pool.blocks[parent_id]
                    parent.cached_children = max(parent.cached_children - 1, 0)
        self.pool.drop(victim)
        seq.stats.blocks_evicted += 1
        self.total_evicted += 1

    # after a step -----------------------------------------------------------------------------------------

    def register_full_blocks(self, seq: Sequence) -> None:
        """Offer the sequence's newly completed blocks (keys and values final) to the prefix cache."""
        if self.prefix_cache is None:
            return
        full = min(seq.num_computed_tokens, seq.num_tokens) // self.block_size
        if full <= seq.num_registered_blocks:
            return
        keys = self._keys(seq)
        for depth in range(seq.num_registered_blocks, full):
            self._register(seq.block_table[depth], keys[depth], keys[depth - 1] if depth else None, depth)
        seq.num_registered_blocks = full

    def _register(self, block: Block, key: int, parent: int | None, depth: int) -> None:
        if block.block_hash is not None or self.prefix_cache is None:
            return
        if not self.prefix_cache.insert(key, block.block_id):
            return  # an identical block is already cached; this copy stays private and is freed later
        block.block_hash = key
        block.parent_hash = parent
        block.depth = depth
        if parent is not None:
            parent_id = self.prefix_cache.get(parent)
            if parent_id is not None:
                self.pool.blocks[parent_id].cached_children += 1

    def free(self, seq: Sequence) -> None:
        """Release every block of the sequence (last block first, so its tail is the first to be evicted)."""
        now = time.monotonic_ns()
        for block in reversed(seq.block_table):
            block.last_access_ns = now
            self.pool.decref(block)
        seq.block_table = []
        seq.num_registered_blocks = 0

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Drop blocks past ``num_tokens`` (rejected speculative tokens); they are not in the cache."""
        keep = -(-num_tokens // self.block_size)
        while len(seq.block_table) > keep:
            block = seq.block_table.pop()
            self.pool.decref(block)
