"""llmtrace.adapters: client middleware and app-side helpers.

    import llmtrace
    from llmtrace.adapters import instrument
    llmtrace.init(db="llmtrace.duckdb", deploy="v2")
    client = instrument(openai.OpenAI())          # or AsyncOpenAI, Anthropic, AsyncAnthropic, httpx.Client

The SDKs are optional extras; nothing here imports them. The app-side helpers live in
``llmtrace.adapters.intake``, ``.loops``, ``.safety`` and ``.meters``.
"""

from .instrument import instrument, is_instrumented, uninstrument
from .transport import AsyncInstrumentedTransport, InstrumentedTransport

__all__ = [
    "AsyncInstrumentedTransport",
    "InstrumentedTransport",
    "instrument",
    "is_instrumented",
    "uninstrument",
]
