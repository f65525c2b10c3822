"""No KV block is ever lost: after any mix of finished, aborted and preempted requests, every block is back
in the pool with no reference left (randomized with hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
from llmtrace.backend.generation.params import SamplingParams, SpeculationConfig

request_st = st.tuples(
    st.integers(1, 60),  # prompt length
    st.integers(1, 12),  # max tokens
    st.integers(0, 3),  # prompt family (shared prefixes within a family)
    st.integers(0, 2),  # priority
    st.sampled_from(["none", "ngram", "self_draft"]),  # speculation
)
action_st = st.one_of(
    st.tuples(st.just("add"), request_st),
    st.tuples(st.just("step"), st.integers(1, 4)),
    st.tuples(st.just("abort"), st.integers(0, 50)),
)


def check_books(engine: Engine) -> None:
    pool = engine.pool
    live = engine.scheduler.running + engine.scheduler.waiting
    refs = sum(b.ref_count for b in pool.blocks)
    assert refs == sum(len(s.block_table) for s in live)
    assert pool.num_in_use == len({b.block_id for s in live for b in s.block_table})
    assert pool.num_free + pool.num_evictable + pool.num_in_use == pool.num_blocks


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    actions=st.lists(action_st, min_size=1, max_size=25),
    policy=st.sampled_from(["lru", "lfu", "leaf_first", "priority"]),
    host=st.sampled_from([0, 6]),
    prefix=st.booleans(),
)
def test_every_block_comes_back(tiny, tokenizer, actions, policy, host, prefix) -> None:  # noqa: ANN001
    config = EngineConfig(num_blocks=12, block_size=4, max_num_seqs=3, max_num_batched_tokens=16,
                          max_prefill_chunk=8, eviction_policy=policy, watermark=0.1, host_tier_blocks=host,
                          enable_prefix_cache=prefix)
    engine = Engine.from_model(tiny, tokenizer, config)
    added: list[str] = []
    for kind, arg in actions:
        if kind == "add":
            length, max_tokens, family, priority, spec = arg
            prompt = [1000 + family * 7 + (i % 5) for i in range(length)]
            rid = f"r{len(added)}"
            params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True,
                                    speculation=SpeculationConfig(method=spec, k=3, draft_layers=1))
            try:
                engine.add_request(EngineRequest(rid, prompt, params, priority=priority))
            except ValueError:
                continue  # too long for this small pool: refused up front, nothing allocated
            added.append(rid)
        elif kind == "step":
            for _ in range(arg):
                engine.step()
                check_books(engine)
        elif added:
            engine.abort(added[arg % len(added)])
    for _ in range(2000):
        if not engine.has_unfinished():
            break
        engine.step()
        check_books(engine)
    assert not engine.has_unfinished()
    assert engine.pool.num_available == engine.pool.num_blocks
    assert all(b.ref_count == 0 for b in engine.pool.blocks)
    assert engine.stats()["running"] == 0


def test_preemption_happens_under_this_pressure(tiny, tokenizer) -> None:  # noqa: ANN001
    """The randomized test above is only meaningful if its pool really runs dry: show it does."""
    config = EngineConfig(num_blocks=12, block_size=4, max_num_seqs=3, max_num_batched_tokens=16,
                          max_prefill_chunk=8, watermark=0.1)
    engine = Engine.from_model(tiny, tokenizer, config)
    for i in range(3):
        engine.add_request(EngineRequest(f"r{i}", [1000 + i] * 12, SamplingParams(temperature=0, max_tokens=12,
                                                                                  ignore_eos=True)))
    preempted = 0
    while engine.has_unfinished():
        engine.step()
        preempted += len(engine.last_step.preempted)
        check_books(engine)
    assert preempted > 0
    assert engine.pool.num_available == engine.pool.num_blocks
