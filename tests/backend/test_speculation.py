"""Speculative decoding verifies k drafted tokens in one forward pass; greedy output is unchanged and the
gen.speculation values say how much was drafted and accepted."""

from __future__ import annotations

import random

import pytest
from engine_helpers import dense_greedy, greedy, run_all, tokens_of

from llmtrace.backend.engine import EngineRequest
from llmtrace.backend.generation.params import SamplingParams, SpeculationConfig


def spec_params(method: str, k: int = 4, max_tokens: int = 16, **kw) -> SamplingParams:  # noqa: ANN003
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                          speculation=SpeculationConfig(method=method, k=k, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["ngram", "self_draft"])
def test_greedy_output_is_unchanged(make_engine, tiny, method: str) -> None:  # noqa: ANN001
    rng = random.Random(61)
    motif = [rng.randrange(300, 40000) for _ in range(6)]
    prompts = [motif * 4, [rng.randrange(300, 40000) for _ in range(15)]]
    engine = make_engine(num_blocks=64, block_size=8)
    reqs = [EngineRequest(f"s{i}", p, spec_params(method, draft_layers=1)) for i, p in enumerate(prompts)]
    outs = run_all(engine, reqs)
    for i, p in enumerate(prompts):
        assert tokens_of(outs[f"s{i}"]) == dense_greedy(tiny, p, 16)[0]
    assert engine.pool.num_available == engine.pool.num_blocks


def test_self_draft_with_all_layers_accepts_everything(make_engine) -> None:  # noqa: ANN001
    """Drafting with the full depth is the model itself: every draft must be accepted (up to float noise
    between a one-token and a k-token pass, which greedy argmax on this model does not see)."""
    engine = make_engine(num_blocks=64, block_size=8)
    seqs = []
    engine.add_request(EngineRequest("full", [400 + i for i in range(10)], spec_params("self_draft", k=3, draft_layers=2)))
    while engine.has_unfinished():
        engine.step()
        seqs += [s for s in engine.scheduler.running if s not in seqs]
    stats = seqs[0].stats
    assert stats.spec_drafted > 0 and stats.spec_accepted == stats.spec_drafted
    assert stats.decode_steps < 15  # fewer steps than tokens: drafts were verified in bulk


def test_speculation_values_are_traced(make_engine, tmp_path) -> None:  # noqa: ANN001
    import json

    import duckdb

    import llmtrace
    from llmtrace.tracer import recording as rec

    db = tmp_path / "s.duckdb"
    llmtrace.init(db=db, service_name="spec-test", strict=True)
    try:
        engine = make_engine(num_blocks=64, block_size=8)
        p = rec.start_pass("tiny-llama")
        motif = [500, 600, 700, 800]
        run_all(engine, [EngineRequest("n", motif * 5, spec_params("ngram", k=3), pass_span=p)])
        p.end()
    finally:
        llmtrace.shutdown()
    attrs = duckdb.connect(str(db), read_only=True).execute(
        "SELECT attributes FROM spans WHERE name = 'gen.speculation'").fetchall()
    values = json.loads(attrs[0][0])
    assert values["llmtrace.spec.method"] == "ngram" and values["llmtrace.spec.k"] == 3
    assert values["llmtrace.spec.drafted"] > 0
    assert 0.0 <= values["llmtrace.spec.acceptance_rate"] <= 1.0
    assert values["llmtrace.spec.batch_size"] == 1.0


def test_plain_requests_beside_speculative_ones(make_engine, tiny) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=64, block_size=8)
    a = [300 + (i % 5) for i in range(20)]
    b = [900 + i for i in range(9)]
    outs = run_all(engine, [EngineRequest("spec", a, spec_params("ngram", k=4, max_tokens=10)),
                            EngineRequest("plain", b, greedy(10))])
    assert tokens_of(outs["spec"]) == dense_greedy(tiny, a, 10)[0]
    assert tokens_of(outs["plain"]) == dense_greedy(tiny, b, 10)[0]
