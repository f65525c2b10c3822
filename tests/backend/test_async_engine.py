"""AsyncEngine: streams outputs to asyncio consumers from a background stepping thread; a cancelled
consumer aborts its request and the blocks come back."""

from __future__ import annotations

import asyncio
import random

import pytest
from engine_helpers import dense_greedy, greedy, random_prompt

from llmtrace.backend.engine import AsyncEngine, EngineRequest
from llmtrace.backend.generation.params import InvalidRequestError


async def collect(engine: AsyncEngine, request: EngineRequest) -> list[int]:
    return [t async for out in engine.generate(request) for t in out.new_token_ids]


async def test_concurrent_generate_matches_dense(make_engine, tiny) -> None:  # noqa: ANN001
    rng = random.Random(51)
    prompts = [random_prompt(rng, n) for n in (5, 33, 12)]
    engine = AsyncEngine(make_engine(num_blocks=64))
    try:
        got = await asyncio.wait_for(
            asyncio.gather(*(collect(engine, EngineRequest(f"r{i}", p, greedy(5))) for i, p in enumerate(prompts))),
            timeout=120,
        )
    finally:
        engine.shutdown()
    for tokens, p in zip(got, prompts, strict=True):
        assert tokens == dense_greedy(tiny, p, 5)[0]


async def test_cancelled_consumer_aborts_and_frees_blocks(make_engine) -> None:  # noqa: ANN001
    inner = make_engine(num_blocks=64)
    engine = AsyncEngine(inner)
    try:
        request = EngineRequest("long", random_prompt(random.Random(52), 40), greedy(10_000))
        seen = 0
        async for _ in engine.generate(request):
            seen += 1
            if seen == 3:
                break  # abandoning the stream closes the generator: the request is aborted
        for _ in range(200):
            if not inner.has_unfinished():
                break
            await asyncio.sleep(0.05)
        assert not inner.has_unfinished()
        assert inner.pool.num_in_use == 0
        task = asyncio.create_task(collect(engine, EngineRequest("t", random_prompt(random.Random(53), 20),
                                                                   greedy(10_000))))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if not inner.has_unfinished():
                break
            await asyncio.sleep(0.05)
        assert inner.pool.num_in_use == 0
    finally:
        engine.shutdown()


async def test_invalid_request_raises_before_streaming(make_engine) -> None:  # noqa: ANN001
    engine = AsyncEngine(make_engine(num_blocks=4, block_size=4))
    try:
        with pytest.raises(InvalidRequestError):
            async for _ in engine.generate(EngineRequest("big", [500] * 100, greedy(1))):
                pass
        assert engine.stats()["running"] == 0
    finally:
        engine.shutdown()


async def test_shutdown_fails_waiting_consumers(make_engine) -> None:  # noqa: ANN001
    engine = AsyncEngine(make_engine(num_blocks=64))
    stream = engine.generate(EngineRequest("s", random_prompt(random.Random(54), 10), greedy(100_000)))
    await stream.__anext__()
    engine.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        async for _ in stream:
            pass
