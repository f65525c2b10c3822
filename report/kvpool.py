"""Hit rate against KV pool size for the report's chart: the replay itself lives in analyzers/cache/kv_replay.py
(the one replay the cache findings' what-if and ``diagnose``'s pool-size curve use too); this module only
names what the report reads from it."""

from __future__ import annotations

from llmtrace.analyzers.cache.kv_replay import PoolCurve, PoolPoint, replay
from llmtrace.analyzers.cache.kv_replay import block_hit_rate as _hit_rate

__all__ = ["PoolCurve", "PoolPoint", "_hit_rate", "replay"]
