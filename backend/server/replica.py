"""One replica: its own engine (and so its own block pool and prefix cache) behind an async front.

Everything the server asks of an engine goes through here, so the rest of the server never touches
engine internals.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from llmtrace.backend.engine.request import EngineRequest, RequestOutput

# This server process's lifetime: every engine's prefix cache starts empty with it, so a pass that repeats a
# prefix served before the server restarted had nothing to reuse (analyzers/cache/cache_loss.py)
BOOT_ID = uuid.uuid4().hex[:12]


class Replica:
    def __init__(self, replica_id: str, engine: Any, async_engine: Any) -> None:
        self.id = replica_id
        self.boot_id = BOOT_ID
        self.engine = engine
        self.async_engine = async_engine
        self.in_flight = 0  # requests this server has handed to the replica and not seen finish
        self.served_total = 0

    @classmethod
    def load_all(cls, count: int, model: str | None, config: Any, first_steps_here: bool = False) -> list[Replica]:
        """``count`` replicas, each with its own engine, KV cache, block pool, prefix cache and scheduler
        thread. The weights are loaded once and shared read-only: a second copy would only cost load time
        and memory, since the forward pass never writes to them. With ``first_steps_here`` the first replica
        gets no thread: the loading thread steps it with ``run_engine()`` (see ``AsyncEngine`` for why)."""
        from llmtrace.backend.engine.async_engine import AsyncEngine
        from llmtrace.backend.engine.engine import Engine, load_model

        weights, tokenizer = load_model(model, config.dtype, config.decode, config.device)
        out = []
        for i in range(count):
            engine = Engine.from_model(weights, tokenizer, config)
            background = not (first_steps_here and i == 0)
            out.append(cls(f"replica-{i}", engine, AsyncEngine(engine, background=background)))
        return out

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def block_size(self) -> int:
        return int(self.engine.config.block_size)

    @property
    def max_model_len(self) -> int:
        return int(self.engine.max_model_len)

    def cached_prefix(self, token_ids: list[int]) -> int:
        try:
            return int(self.engine.longest_cached_prefix(token_ids))
        except Exception:  # a lookup racing the engine thread is only a hint; never fail the request on it
            return 0

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        self.in_flight += 1
        try:
            async with aclosing(self.async_engine.generate(request)) as outputs:
                async for out in outputs:
                    yield out
        finally:
            self.in_flight -= 1
            self.served_total += 1

    def abort(self, request_id: str) -> None:
        # Unknown or finished ids are ignored by the engine; the async front also aborts on cancellation.
        self.engine.abort(request_id)

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    def run_engine(self) -> None:
        """Step this replica's engine on the calling thread until ``shutdown()`` (``first_steps_here``)."""
        self.async_engine.run()

    def shutdown(self) -> None:
        self.async_engine.shutdown()
