"""The prefix cache: full KV blocks keyed by a hash chain.

A block's key covers its parent's key and its own tokens, so equal keys mean equal whole prefixes, and the
first differing key marks where two prompts part. Only full blocks are cached; a lookup never covers the
last prompt token, because the next token needs that token's logits.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

from llmtrace.tracer import capture


def hash_block(parent: int | None, tokens: Sequence[int]) -> int:
    digest = hashlib.blake2b(digest_size=8)
    digest.update((parent or 0).to_bytes(8, "little"))
    digest.update(array("q", tokens).tobytes())
    return int.from_bytes(digest.digest(), "little")


def chain_hashes(token_ids: Sequence[int], block_size: int, start: Sequence[int] = ()) -> list[int]:
    """Keys of every full block of ``token_ids``; ``start`` holds keys already known for the first blocks."""
    keys = list(start)
    parent = keys[-1] if keys else None
    for i in range(len(keys), len(token_ids) // block_size):
        parent = hash_block(parent, token_ids[i * block_size : (i + 1) * block_size])
        keys.append(parent)
    return keys


def recorded_key(key: int) -> str:
    """A block key as spans record it: keyed with the store's secret (tracer.capture), so equal prefixes
    still match across the store, but a recorded chain cannot be brute-forced back to guessable token ids.
    The cache itself keeps the plain key: it never leaves the process."""
    digest = capture.hasher()
    digest.update(key.to_bytes(8, "little"))
    return digest.hexdigest()


def block_hashes_hex(token_ids: Sequence[int], block_size: int = 16) -> list[str]:
    """The chain as recorded (``intake.tokenization``), comparable with ``llmtrace.prefix.key``."""
    return [recorded_key(h) for h in chain_hashes(token_ids, block_size)]


def matchable_blocks(num_tokens: int, block_size: int) -> int:
    """Full blocks a lookup may return: all but the block that would hold the last token."""
    return max(num_tokens - 1, 0) // block_size


class PrefixCache:
    """Key -> block id of every full block still resident, with hit counters for the engine's stats."""

    def __init__(self) -> None:
        self._index: dict[int, int] = {}
        self.queried_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._index)

    def get(self, key: int) -> int | None:
        return self._index.get(key)

    def insert(self, key: int, block_id: int) -> bool:
        """Register a block; False when the key is already cached (the caller keeps its own copy private)."""
        if key in self._index:
            return False
        self._index[key] = block_id
        return True

    def remove(self, key: int) -> None:
        self._index.pop(key, None)

    def count_lookup(self, queried: int, hit: int) -> None:
        self.queried_tokens += queried
        self.hit_tokens += hit

    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0
