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

Two sub-packages, one arrow (helpers may import the middleware, never the reverse):

- ``middleware``: ``instrument`` and the transport, one call's state (``call``), the provider parsers,
  SSE, usage, the stage writers (``client_stages``, ``wire``) and the price table the pass cost comes from.
- ``helpers``: the app-side helpers, each usable alone, each emitting its stage span:

    prompt_assembly  SystemPromptAssembler / assemble_system_prompt, format_evidence, order_context
    loops       agent, Tools / dispatch, fan_out / afan_out
    budget      Budget, BudgetExceeded
    compaction  compact, record_compaction
    safety      scan (injection)
    moderation  StreamModerator
    stop_reason check_stop
    meters      load_prices, pass_cost, record_accounting, trace_cost, cache_hit_rate, mark_deploy

Reading prompts and conversations (sessions, divergence, prompt segments, evidence shapes) lives in
``llmtrace.tracer.reading``, which the collector shares. The modules' first paths keep importing
(``from llmtrace.adapters.helpers import loops`` is ``llmtrace.adapters.helpers.loops``).
"""

from llmtrace.adapters.middleware.instrument import instrument, is_instrumented, uninstrument
from llmtrace.adapters.middleware.transport import AsyncInstrumentedTransport, InstrumentedTransport
from llmtrace.tracer import aliases as _aliases
from llmtrace.tracer.reading.sessions import session

_MIDDLEWARE = ("anthropic_parser", "cache_diagnostics", "call", "client_stages", "encoding", "integrations",
               "observation", "openai_parser", "protocol", "request_usage", "responses_parser", "sse",
               "transport", "usage_source", "wire")
# the pass's usage and its price, read by the middleware and the collector alike, live in tracer/record
_RECORD = ("prices", "usage")
_HELPERS = ("budget", "compaction", "loops", "meters", "moderation", "prompt_assembly", "safety", "stop_reason")
_READING = ("assistant_turn", "divergence", "segments", "sessions", "textscan", "volatile")
_aliases.install(__name__, {
    **{m: f"{__name__}.middleware.{m}" for m in _MIDDLEWARE},
    **{m: f"{__name__}.helpers.{m}" for m in _HELPERS},
    **{m: f"llmtrace.tracer.reading.{m}" for m in _READING},
    **{m: f"llmtrace.tracer.record.{m}" for m in _RECORD},
    "collect_conversations": "llmtrace.tracer.reading.conversations",
})

__all__ = [
    "AsyncInstrumentedTransport",
    "InstrumentedTransport",
    "instrument",
    "is_instrumented",
    "session",
    "uninstrument",
]
