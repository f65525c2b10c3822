"""Engine: paged KV block pool, prefix cache, eviction, host tier, continuous-batching scheduler."""
