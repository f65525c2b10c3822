"""llmtrace.tui — ``llmtrace explore``, the terminal UI over a store.

It reads the store through short read-only connections (see ``data/store_reader.py``) so it never
blocks a process writing to the same file, and imports only ``llmtrace.tracer``, ``llmtrace.analyzers``,
Textual and rich.
"""
