"""The engine end to end on the tiny model: outputs equal the dense reference, prefix hits skip exactly
the cached tokens, preemption recomputes without changing the answer, aborts give blocks back."""

from __future__ import annotations

import random

import pytest
import torch
from engine_helpers import dense_greedy, greedy, random_prompt, run_all, tokens_of

from llmtrace.backend.engine import EngineRequest
from llmtrace.backend.generation.params import InvalidRequestError


def test_continuous_batching_matches_dense_greedy(make_engine, tiny) -> None:  # noqa: ANN001
    rng = random.Random(11)
    prompts = [random_prompt(rng, n) for n in (3, 40, 17, 64, 9)]
    engine = make_engine(num_blocks=64, max_num_batched_tokens=24, max_prefill_chunk=16, max_num_seqs=4)
    seen: dict[str, list[torch.Tensor]] = {}
    engine.logits_sink = lambda rid, rows: seen.setdefault(rid, []).append(rows.clone())
    outs = run_all(engine, [EngineRequest(f"r{i}", p, greedy(6)) for i, p in enumerate(prompts)])
    for i, p in enumerate(prompts):
        want, rows = dense_greedy(tiny, p, 6)
        assert tokens_of(outs[f"r{i}"]) == want
        got = torch.cat(seen[f"r{i}"])
        assert (got - torch.stack(rows)).abs().max().item() < 2e-4
        assert outs[f"r{i}"][-1].finished and outs[f"r{i}"][-1].finish_reason == "length"


def test_prefix_hit_skips_exactly_the_cached_tokens(make_engine, tiny) -> None:  # noqa: ANN001
    rng = random.Random(12)
    system = random_prompt(rng, 50)
    engine = make_engine(num_blocks=64, block_size=16)
    run_all(engine, [EngineRequest("first", system + random_prompt(rng, 7), greedy(2))])
    second = system + random_prompt(rng, 11)
    prefilled: list[int] = []
    engine.add_request(EngineRequest("second", second, greedy(3)))
    outs = []
    while engine.has_unfinished():
        outs += engine.step()
        prefilled.append(engine.last_step.num_prefill_tokens)
    assert outs[-1].num_cached_tokens == 48  # three full blocks of the shared 50 tokens
    assert prefilled[0] == len(second) - 48  # the first step computed only the uncached tail
    assert sum(prefilled) == len(second) - 48
    assert tokens_of(outs) == dense_greedy(tiny, second, 3)[0]
    assert engine.longest_cached_prefix(second + [7] * 20) == 48  # its 4th block never filled with computed tokens


def test_lookup_never_covers_the_last_prompt_token(make_engine) -> None:  # noqa: ANN001
    prompt = random_prompt(random.Random(13), 32)  # exactly two blocks
    engine = make_engine(num_blocks=32, block_size=16)
    run_all(engine, [EngineRequest("a", prompt, greedy(1))])
    outs = run_all(engine, [EngineRequest("b", prompt, greedy(1))])
    assert outs["b"][-1].num_cached_tokens == 16  # not 32: the last token's logits are needed
    assert engine.longest_cached_prefix(prompt) == 16


def test_prefix_cache_can_be_disabled(make_engine) -> None:  # noqa: ANN001
    prompt = random_prompt(random.Random(14), 40)
    engine = make_engine(num_blocks=32, enable_prefix_cache=False)
    run_all(engine, [EngineRequest("a", prompt, greedy(1))])
    outs = run_all(engine, [EngineRequest("b", prompt, greedy(1))])
    assert outs["b"][-1].num_cached_tokens == 0
    assert engine.longest_cached_prefix(prompt) == 0


def test_preemption_recomputes_and_keeps_the_answer(make_engine, tiny) -> None:  # noqa: ANN001
    rng = random.Random(15)
    prompts = [random_prompt(rng, 30) for _ in range(4)]
    reqs = [EngineRequest(f"r{i}", p, greedy(20)) for i, p in enumerate(prompts)]
    engine = make_engine(num_blocks=14, block_size=8, watermark=0.0, max_num_seqs=4)
    preempted: list[str] = []
    for r in reqs:
        engine.add_request(r)
    outs: dict[str, list] = {r.request_id: [] for r in reqs}
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id].append(o)
        preempted += engine.last_step.preempted
    assert preempted, "the pool was meant to run dry"
    for i, p in enumerate(prompts):
        assert tokens_of(outs[f"r{i}"]) == dense_greedy(tiny, p, 20)[0]
    assert engine.pool.num_available == engine.pool.num_blocks


def test_abort_returns_blocks_and_ends_the_stream(make_engine) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=32)
    engine.add_request(EngineRequest("x", random_prompt(random.Random(16), 40), greedy(50)))
    engine.step()
    engine.step()
    assert engine.pool.num_in_use > 0
    engine.abort("x")
    outs = engine.step()
    assert [(o.request_id, o.finished, o.finish_reason) for o in outs] == [("x", True, "abort")]
    assert engine.pool.num_in_use == 0
    assert not engine.has_unfinished()


def test_fairness_short_request_is_not_starved_by_a_long_prefill(make_engine) -> None:  # noqa: ANN001
    rng = random.Random(17)
    engine = make_engine(num_blocks=128, max_num_batched_tokens=64, max_prefill_chunk=32)
    engine.add_request(EngineRequest("long", random_prompt(rng, 600), greedy(1)))
    engine.step()
    engine.add_request(EngineRequest("short", random_prompt(rng, 5), greedy(1)))
    finished_at: dict[str, int] = {}
    step = 1
    while engine.has_unfinished():
        step += 1
        for o in engine.step():
            if o.finished:
                finished_at[o.request_id] = step
    assert finished_at["short"] == 2  # admitted beside the long prefill in the very next step
    assert finished_at["long"] > 10


def test_bad_requests_are_refused_up_front(make_engine) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=8, block_size=16)
    with pytest.raises(InvalidRequestError):
        engine.add_request(EngineRequest("big", [5] * 200, greedy(1)))
    with pytest.raises(InvalidRequestError):
        engine.add_request(EngineRequest("vocab", [10**6], greedy(1)))
    with pytest.raises(InvalidRequestError):
        EngineRequest("empty", [], greedy(1))
    engine.add_request(EngineRequest("dup", [5, 6], greedy(1)))
    with pytest.raises(InvalidRequestError):
        engine.add_request(EngineRequest("dup", [5, 6], greedy(1)))


def test_output_stops_at_the_context_limit(make_engine) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=8, block_size=4, watermark=0.0, max_model_len=20)
    outs = run_all(engine, [EngineRequest("a", list(range(300, 315)), greedy(50))])
    assert outs["a"][-1].finish_reason == "length"
    assert outs["a"][-1].num_output_tokens == 5


def test_stats_report_the_pool(make_engine) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=40)
    run_all(engine, [EngineRequest("a", random_prompt(random.Random(18), 50), greedy(2))])
    stats = engine.stats()
    assert stats["running"] == 0 and stats["waiting"] == 0
    assert stats["free_blocks"] + stats["cached_blocks"] == 40
    assert stats["cached_blocks"] == 3
    assert stats["attention_backend"] == "torch" and stats["attention_reason"] == "no CUDA device"


@pytest.mark.slow
def test_real_model_says_paris(real_f32, tokenizer) -> None:  # noqa: ANN001
    from llmtrace.backend.engine import Engine, EngineConfig

    engine = Engine.from_model(real_f32, tokenizer, EngineConfig(num_blocks=64))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                         add_generation_prompt=True)
    from llmtrace.backend.generation.params import SamplingParams

    outs = run_all(engine, [EngineRequest("p", tokenizer.encode(text), SamplingParams(temperature=0, max_tokens=24))])
    reply = "".join(o.text_delta for o in outs["p"])
    assert "Paris" in reply, reply
    assert outs["p"][-1].finish_reason == "stop"
    # the same through the messages convenience API; the prompt is now fully cached but its last block
    again = list(engine.generate([{"role": "user", "content": "What is the capital of France?"}],
                                 SamplingParams(temperature=0, max_tokens=24)))
    assert "".join(o.text_delta for o in again) == reply
    assert again[-1].num_cached_tokens == (len(tokenizer.encode(text)) - 1) // 16 * 16
