"""App-side helpers, each usable alone, each emitting its stage span: prompt assembly, loops and tools,
budgets, compaction, injection scan, streaming moderation, stop-reason checks, meters.

They sit above the middleware (``budget`` prices a pass as the middleware does) and below nothing.
"""
