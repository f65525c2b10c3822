"""Eviction policies pick the block they promise; the watermark triggers eviction; the host tier moves
blocks out and back and the restored keys/values give the same answer."""

from __future__ import annotations

import random

import pytest
from engine_helpers import dense_greedy, greedy, random_prompt, run_all, tokens_of

from llmtrace.backend.engine import EngineRequest
from llmtrace.backend.engine.block_pool import Block
from llmtrace.backend.engine.eviction import make_policy


def blocks() -> list[Block]:
    return [
        Block(0, block_hash=1, depth=0, last_access_ns=10, hits=5, priority=2, cached_children=1),
        Block(1, block_hash=2, depth=1, last_access_ns=30, hits=0, priority=0, cached_children=0),
        Block(2, block_hash=3, depth=0, last_access_ns=20, hits=1, priority=1, cached_children=0),
        Block(3, block_hash=4, depth=2, last_access_ns=10, hits=3, priority=1, cached_children=0),
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("lru", 3), ("lfu", 1), ("leaf_first", 3), ("priority", 1)],
)
def test_policy_picks(policy: str, expected: int) -> None:
    assert make_policy(policy).pick(blocks()).block_id == expected


def test_leaf_first_keeps_a_shared_root_over_an_older_leaf() -> None:
    root = Block(0, block_hash=1, last_access_ns=1, cached_children=2)
    leaf = Block(1, block_hash=2, depth=1, last_access_ns=50)
    assert make_policy("leaf_first").pick([root, leaf]) is leaf
    assert make_policy("lru").pick([root, leaf]) is root


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="eviction policy"):
        make_policy("random")


def test_watermark_triggers_eviction(make_engine) -> None:  # noqa: ANN001
    rng = random.Random(31)
    engine = make_engine(num_blocks=16, block_size=4, watermark=0.25)
    for i in range(6):
        run_all(engine, [EngineRequest(f"r{i}", random_prompt(rng, 10), greedy(2))])
        assert engine.pool.num_free >= 4 or engine.pool.num_evictable == 0  # the watermark is kept
    assert engine.stats()["evicted_blocks"] > 0


def test_host_tier_restores_evicted_blocks(make_engine, tiny) -> None:  # noqa: ANN001
    rng = random.Random(32)
    system = random_prompt(rng, 24)
    engine = make_engine(num_blocks=14, block_size=4, watermark=0.0, host_tier_blocks=32)
    run_all(engine, [EngineRequest("warm", system + [500], greedy(1))])
    for i in range(4):  # unrelated traffic pushes the system prompt's blocks out to the host tier
        run_all(engine, [EngineRequest(f"other{i}", random_prompt(rng, 30), greedy(2))])
    assert engine.prefix_cache is not None
    assert len(engine.blocks.host_tier) > 0
    prompt = system + [501, 502]
    assert engine.longest_cached_prefix(prompt) == 24
    engine.add_request(EngineRequest("back", prompt, greedy(4)))
    seq = engine._seqs.get("back")  # noqa: SLF001 - read its stats after the step below
    outs = []
    while engine.has_unfinished():
        outs += engine.step()
        seq = seq or next((s for s in engine.scheduler.running if s.request_id == "back"), None)
    assert outs[-1].num_cached_tokens == 24
    assert seq is not None and seq.stats.offload_in > 0 and seq.stats.offload_bytes > 0
    assert seq.stats.offload_ms >= 0.0
    assert tokens_of(outs) == dense_greedy(tiny, prompt, 4)[0]
