"""llmtrace.adapters: client middleware and app-side helpers.

Client middleware (one httpx transport wrapping the client's own):

    import llmtrace
    from llmtrace.adapters import instrument
    llmtrace.init(db="llmtrace.duckdb", deploy="v2")
    client = instrument(openai.OpenAI())  # AsyncOpenAI, Anthropic, AsyncAnthropic, httpx.Client/AsyncClient

Calls of one conversation share ``session.id`` (``with llmtrace.session(id, user=...)``, the request's own
user/metadata fields, or inferred from the messages' prefix chain); a tool round trip stays in the trace of
the call whose tool calls it answers.

Every chat completion, Responses API call, legacy completion or Anthropic message becomes a client pass
span (``chat {model}``) with the stages a client can see; ``traceparent`` is injected so an
instrumented server's pass span joins the same trace. The SDKs are optional extras: nothing here
imports them.

App-side helpers, each usable alone, each emitting its stage span:

    prompt_assembly  SystemPromptAssembler / assemble_system_prompt, format_evidence, order_context
    loops       agent, Tools / dispatch, fan_out / afan_out
    budget      Budget, BudgetExceeded
    compaction  compact, record_compaction
    safety      scan (injection)
    moderation  StreamModerator
    stop_reason check_stop
    meters      load_prices, pass_cost, record_accounting, trace_cost, cache_hit_rate, mark_deploy
"""

from .instrument import instrument, is_instrumented, uninstrument
from .sessions import session
from .transport import AsyncInstrumentedTransport, InstrumentedTransport

__all__ = [
    "AsyncInstrumentedTransport",
    "InstrumentedTransport",
    "instrument",
    "is_instrumented",
    "session",
    "uninstrument",
]
