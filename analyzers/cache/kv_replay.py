"""Replay of the recorded KV block-hash chains through LRU prefix caches: the one replay behind the report's
hit-rate-against-pool-size chart, the cache findings' "if fixed" numbers and the pool-size curve in
``diagnose``.

A hit rate is a property of memory pressure as much as of a prompt: the same traffic hits more in a larger
pool. The bundled backend records each prompt's chain of block hashes (``intake.tokenization``), its pool
size and block size (``cache.block_allocation``) and what its pool evicted (``cache.eviction``); replaying
the chains, per replica and in arrival order, through an LRU prefix cache of N blocks gives the hit rate N
blocks would have had. Leaves are evicted before their parents (a chain is touched leaf first, root last),
as a prefix cache must, so a cached block always has its prefix cached too. Running sequences' own blocks
are not modelled, so each point is an upper bound for its size.

A lookup hits the leading blocks of a chain that are resident, never the block holding the last prompt
token (the engine needs that token's logits: backend/engine/prefix_cache.py), so hit *tokens* are whole
blocks, as the engine reports them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from llmtrace.analyzers.core.query import SKEW_NS, Query, as_int, attr
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.views import capped_cached_sql

# (replica, block hashes, prompt tokens, cached tokens), oldest first: one recorded prompt
Chain = tuple[str, Sequence[str], int, int]

POOL_MULTIPLES = (0.5, 1.0, 2.0, 4.0)  # the pool sizes diagnose replays, as multiples of the engine's pool
REPLAY_BLOCK_VISITS = 60_000  # newest blocks' worth of chains diagnose replays (each size costs one pass)


@dataclass(frozen=True, slots=True)
class Replayed:
    """What one replay found: blocks and tokens served from the simulated cache."""

    hit_blocks: int
    blocks: int
    hit_tokens: int
    prompt_tokens: int

    @property
    def block_rate(self) -> float:
        return self.hit_blocks / self.blocks if self.blocks else 0.0

    @property
    def token_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def simulate(chains: Sequence[Chain], capacity: int | None, block_size: int = 16) -> Replayed:
    """Replay ``chains`` through one LRU prefix cache per replica of ``capacity`` blocks (None: unbounded)."""
    pools: dict[str, OrderedDict[str, None]] = {}
    hits = total = hit_tokens = prompt = 0
    for replica, chain, prompt_tokens, _ in chains:
        pool = pools.setdefault(replica, OrderedDict())
        n = 0
        for h in chain:
            if h not in pool:
                break
            n += 1
        hits += n
        total += len(chain)
        prompt += prompt_tokens
        hit_tokens += min(n, max(prompt_tokens - 1, 0) // block_size) * block_size
        for h in reversed(chain):  # the root touched last stays longest
            if h in pool:
                pool.move_to_end(h)
            else:
                pool[h] = None
        if capacity is not None:
            while len(pool) > capacity:
                pool.popitem(last=False)
    return Replayed(hits, total, hit_tokens, prompt)


def block_hit_rate(chains: Sequence[Chain], capacity: int) -> float:
    """Cached blocks over prompt blocks with ``capacity`` blocks per replica (the report's curve)."""
    return simulate(chains, capacity).block_rate


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


def replay(chains: Sequence[Chain], sizes: int = 12) -> PoolCurve | None:
    """The report's curve: block hit rate on a geometric grid from one block to the whole working set."""
    if not chains:
        return None
    distinct = len({(r, h) for r, chain, _, _ in chains for h in chain})
    top = max(1, distinct)
    # Geometric from one block to the whole working set: where the knee sits depends on the traffic.
    grid = sorted({max(1, round(top ** (i / (sizes - 1)))) for i in range(sizes)} if sizes > 1 else {top})
    points = tuple(PoolPoint(n, block_hit_rate(chains, n)) for n in grid)
    prompt = sum(p for _, _, p, _ in chains)
    cached = sum(c for _, _, _, c in chains)
    return PoolCurve(points, len(chains), distinct, cached / prompt if prompt else None)


# ── what diagnose reads from a store ────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class Pool:
    """The engine's KV pool as its spans recorded it (0 blocks: not recorded, an older engine)."""

    blocks: int
    block_size: int


def pool(q: Query) -> Pool:
    """The pool size and block size from the newest block-allocation records (an engine constant: a few
    hundred records say it, and parsing only those keeps diagnose fast on a large store)."""
    a = q.one(f"""
        SELECT max({attr(N.BLOCKS_POOL_BLOCKS)}) AS pool,
               mode({attr(N.BLOCKS_BLOCK_SIZE)}) AS block_size
        FROM (SELECT attributes FROM {q.spans} WHERE stage = '{S.CACHE_BLOCK_ALLOCATION}'
              ORDER BY start_ns DESC LIMIT 500)""")
    return Pool(as_int(a.get("pool")), as_int(a.get("block_size")) or 16)


def recorded_chains(q: Query, visits: int = REPLAY_BLOCK_VISITS) -> list[Chain]:
    """(replica, chain, prompt tokens, cached tokens) of the server passes, oldest first: the newest
    ``visits`` blocks' worth."""
    # only the newest passes can fit the budget (a chain has at least one block): parse those alone
    cut = q.one(f"""SELECT min(start_ns) AS lo FROM (SELECT start_ns FROM {q.passes}
                    WHERE server_span_id IS NOT NULL ORDER BY start_ns DESC LIMIT {int(visits) // 3})""").get("lo")
    tok = q.stage_sql(S.INTAKE_TOKENIZATION, {"chain": N.TOKENIZATION_BLOCK_HASHES},
                      f"AND start_ns >= {as_int(cut) - SKEW_NS}" if cut is not None else "")
    rows = q.rows(f"""
        SELECT replica, chain, prompt_tokens, cached_tokens FROM (
            SELECT coalesce(r.replica, '') AS replica, t.chain, coalesce(r.prompt_tokens, 0) AS prompt_tokens,
                   coalesce({capped_cached_sql("r.cached_tokens", "r.prompt_tokens")}, 0) AS cached_tokens, r.start_ns,
                   sum(len(t.chain)) OVER (ORDER BY r.start_ns DESC ROWS UNBOUNDED PRECEDING) AS visits
            FROM {tok} t JOIN {q.passes} r ON r.server_span_id = t.parent_span_id
            WHERE len(t.chain) > 0)
        WHERE visits <= {int(visits)} ORDER BY start_ns""")
    return [(str(r["replica"]), list(r["chain"]), as_int(r["prompt_tokens"]), as_int(r["cached_tokens"]))
            for r in rows]


@dataclass(frozen=True, slots=True)
class SizePoint:
    multiple: float  # of the engine's pool
    blocks: int
    hit_rate: float  # cached prompt tokens over prompt tokens, as the engine counts them


@dataclass(frozen=True, slots=True)
class SizeCurve:
    """Hit rate at a few pool sizes around the engine's own, with what the engine measured."""

    points: tuple[SizePoint, ...]
    pool: Pool
    passes: int
    measured: float

    def at(self, multiple: float) -> float | None:
        return next((p.hit_rate for p in self.points if p.multiple == multiple), None)

    @property
    def memory_bound(self) -> bool:
        """Whether more memory would buy hits: the 4x pool beats the engine's by over 5 points."""
        one, four = self.at(1.0), self.at(POOL_MULTIPLES[-1])
        return one is not None and four is not None and four - one > 0.05


def size_curve(chains: Sequence[Chain], p: Pool) -> SizeCurve | None:
    """The replayed hit rate at ``POOL_MULTIPLES`` of the recorded pool; None without a recorded pool."""
    if not chains or p.blocks <= 0:
        return None
    pts = tuple(SizePoint(m, max(1, round(m * p.blocks)),
                          simulate(chains, max(1, round(m * p.blocks)), p.block_size).token_rate)
                for m in POOL_MULTIPLES)
    prompt = sum(c[2] for c in chains)
    return SizeCurve(pts, p, len(chains), sum(c[3] for c in chains) / prompt if prompt else 0.0)


def curve_of(q: Query) -> SizeCurve | None:
    """The pool-size curve of the store's recent server passes (the bundled backend's spans), or None."""
    p = pool(q)
    if p.blocks <= 0:
        return None
    return size_curve(recorded_chains(q), p)
