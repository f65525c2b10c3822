"""Hit rate against KV pool size, by replaying the recorded block-hash chains through prefix caches of
several sizes.

A hit rate is a property of memory pressure as much as of a prompt: the same traffic hits more in a larger
pool. The bundled backend records each prompt's chain of block hashes (``intake.tokenization``) and what
its pool evicted (``cache.eviction``); replaying the chains, per replica and in arrival order, through an
LRU prefix cache of N blocks gives the hit rate N blocks would have had. Leaves are evicted before their
parents (a chain is touched leaf first, root last), as a prefix cache must, so a cached block always has
its prefix cached too. Running sequences' own blocks are not modelled, so the curve is an upper bound
for each size.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PoolPoint:
    blocks: int
    hit_rate: float  # cached blocks over prompt blocks


@dataclass(frozen=True, slots=True)
class PoolCurve:
    points: tuple[PoolPoint, ...]
    passes: int
    distinct_blocks: int
    measured_hit_rate: float | None  # what the engine reported for the same passes


def replay(chains: list[tuple[str, list[str], int, int]], sizes: int = 12) -> PoolCurve | None:
    """``chains``: (replica, block hashes, prompt tokens, cached tokens), oldest first."""
    if not chains:
        return None
    distinct = len({(r, h) for r, chain, _, _ in chains for h in chain})
    top = max(1, distinct)
    # Geometric from one block to the whole working set: where the knee sits depends on the traffic.
    grid = sorted({max(1, round(top ** (i / (sizes - 1)))) for i in range(sizes)} if sizes > 1 else {top})
    points = tuple(PoolPoint(n, _hit_rate(chains, n)) for n in grid)
    prompt = sum(p for _, _, p, _ in chains)
    cached = sum(c for _, _, _, c in chains)
    return PoolCurve(points, len(chains), distinct, cached / prompt if prompt else None)


def _hit_rate(chains: list[tuple[str, list[str], int, int]], capacity: int) -> float:
    pools: dict[str, OrderedDict[str, None]] = {}
    hits = total = 0
    for replica, chain, _, _ in chains:
        pool = pools.setdefault(replica, OrderedDict())
        n = 0
        for h in chain:
            if h not in pool:
                break
            n += 1
        hits += n
        total += len(chain)
        for h in reversed(chain):  # the root touched last stays longest
            if h in pool:
                pool.move_to_end(h)
            else:
                pool[h] = None
        while len(pool) > capacity:
            pool.popitem(last=False)
    return hits / total if total else 0.0
