"""Engine: paged KV block pool, prefix cache, eviction, host tier, continuous-batching scheduler."""

from llmtrace.backend.engine.async_engine import AsyncEngine
from llmtrace.backend.engine.config import EngineConfig
from llmtrace.backend.engine.engine import Engine
from llmtrace.backend.engine.request import EngineRequest, RequestOutput

__all__ = ["AsyncEngine", "Engine", "EngineConfig", "EngineRequest", "RequestOutput"]
