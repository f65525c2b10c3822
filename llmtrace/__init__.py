"""llmtrace: trace every LLM request through the 42 stages between a call and its first character.

    import llmtrace
    llmtrace.init(db="llmtrace.duckdb", deploy="v2")
    from llmtrace.adapters import instrument
    client = instrument(openai.OpenAI())
"""

from typing import Any

from llmtrace.tracer import (
    force_flush,
    init,
    mark_unobserved,
    record_stage,
    shutdown,
    stage,
    start_pass,
    tool_span,
)

__version__ = "0.1.0"

__all__ = ["__version__", "force_flush", "init", "instrument", "mark_unobserved", "record_stage", "session",
           "shutdown", "stage", "start_pass", "tool_span"]


def instrument(client: object, **kwargs: Any) -> object:  # kwargs: those of llmtrace.adapters.middleware.instrument
    """Instrument an OpenAI / Anthropic / httpx client (see ``llmtrace.adapters.middleware.instrument``)."""
    from llmtrace.adapters import instrument as _instrument

    return _instrument(client, **kwargs)


def session(session_id: str, user: str | None = None) -> object:
    """Group the instrumented calls inside ``with llmtrace.session(id, user=...)`` (see ``llmtrace.adapters``)."""
    from llmtrace.tracer.reading.sessions import session as _session

    return _session(session_id, user)
