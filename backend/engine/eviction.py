"""Which cached blocks to recycle when the pool runs low. Every policy picks among unused, hashed blocks."""

from __future__ import annotations

from typing import Protocol

from llmtrace.backend.engine.block_pool import Block


class EvictionPolicy(Protocol):
    name: str

    def pick(self, candidates: list[Block]) -> Block:
        """The block to evict next (``candidates`` is non-empty)."""
        ...


class LRUPolicy:
    """Least recently used first; among equals the deepest block, so shared roots stay longest."""

    name = "lru"

    def pick(self, candidates: list[Block]) -> Block:
        return min(candidates, key=lambda b: (b.last_access_ns, -b.depth))


class LFUPolicy:
    """Fewest cache hits first, then least recently used."""

    name = "lfu"

    def pick(self, candidates: list[Block]) -> Block:
        return min(candidates, key=lambda b: (b.hits, b.last_access_ns, -b.depth))


class LeafFirstPolicy:
    """Blocks no cached block extends first (the ends of chains), so a shared prefix is never cut in the
    middle while its tails are still cached; then least recently used."""

    name = "leaf_first"

    def pick(self, candidates: list[Block]) -> Block:
        return min(candidates, key=lambda b: (b.cached_children > 0, b.last_access_ns, -b.depth))


class PriorityPolicy:
    """Blocks last used by the lowest-priority requests first, then least recently used."""

    name = "priority"

    def pick(self, candidates: list[Block]) -> Block:
        return min(candidates, key=lambda b: (b.priority, b.last_access_ns, -b.depth))


POLICIES: dict[str, type] = {p.name: p for p in (LRUPolicy, LFUPolicy, LeafFirstPolicy, PriorityPolicy)}


def make_policy(name: str) -> EvictionPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; choose one of {', '.join(POLICIES)}") from None
