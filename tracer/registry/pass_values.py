"""The pass span's own values: what one inference pass (a ``chat``/``text_completion`` GenAI span, client or
server side) carries beside its stage spans. Part of the registry (see ``stages.py``): declared once, with
type, unit and meaning, and the column of the ``requests``/``passes`` views that shows it, where one does.
"""

from __future__ import annotations

from llmtrace.tracer.registry.model import BoundaryValue, V

PASS_VALUES: tuple[BoundaryValue, ...] = (
    # ── what was asked ───────────────────────────────────────────────────────────────────────
    V("llmtrace.side", "str", "", "who recorded this span: client, server or app", column="side"),
    V("gen_ai.operation.name", "str", "", "GenAI operation: chat, text_completion, invoke_agent, ...", semconv=True,
      column="operation"),
    V("gen_ai.provider.name", "str", "", "who served the pass (openai, anthropic, llmtrace, ...)", semconv=True,
      column="provider", prefer="client"),
    V("gen_ai.request.model", "str", "", "model name the caller asked for", semconv=True, column="model", summary=1),
    V("gen_ai.request.temperature", "float", "", "sampling temperature asked for", semconv=True,
      column="temperature"),
    V("gen_ai.request.top_p", "float", "", "nucleus sampling mass asked for", semconv=True, column="top_p"),
    V("gen_ai.request.top_k", "int", "", "top-k asked for", semconv=True),
    V("gen_ai.request.seed", "int", "", "sampling seed asked for", semconv=True, column="seed"),
    V("gen_ai.request.max_tokens", "int", "tokens", "output cap asked for", semconv=True, column="max_tokens"),
    V("gen_ai.request.frequency_penalty", "float", "", "frequency penalty asked for", semconv=True),
    V("gen_ai.request.presence_penalty", "float", "", "presence penalty asked for", semconv=True),
    V("gen_ai.output.type", "str", "", "output asked for: text, json (response_format), ...", semconv=True),
    V("gen_ai.conversation.id", "str", "", "conversation the pass belongs to (a Responses chain's first id)",
      semconv=True),
    V("gen_ai.agent.name", "str", "", "agent whose turn this is (on the app's invoke_agent span)", semconv=True),
    V("session.id", "str", "", "session of the call: llmtrace.session(), provider fields, or inferred",
      column="session_id", prefer="client"),
    V("user.id", "str", "", "end user of the call, when the app or the provider fields say", column="user_id", prefer="client"),
    V("llmtrace.session.inferred", "bool", "", "true when the session was inferred from the prompts' prefix chain"),
    V("llmtrace.stream.requested", "bool", "", "whether the caller asked for a stream"),
    V("llmtrace.api", "str", "", "wire protocol of the call (chat_completions, responses, messages, completions)"),
    # ── what came back ───────────────────────────────────────────────────────────────────────
    V("gen_ai.response.model", "str", "", "model that answered", semconv=True, column="response_model", summary=2),
    V("gen_ai.response.id", "str", "", "the provider's id of the response", semconv=True),
    V("gen_ai.response.finish_reasons", "str[]", "", "why generation ended, as the provider spelt it "
      "(the views normalise it)", semconv=True, column="finish_reason", summary=8),
    V("gen_ai.usage.input_tokens", "int", "tokens", "prompt tokens (cached ones included)", semconv=True,
      column="prompt_tokens", summary=3),
    V("gen_ai.usage.output_tokens", "int", "tokens", "tokens generated", semconv=True, column="output_tokens", summary=5),
    V("gen_ai.usage.cache_read.input_tokens", "int", "tokens", "prompt tokens served from a cache", semconv=True,
      column="cached_tokens", summary=4),
    V("gen_ai.usage.cache_creation.input_tokens", "int", "tokens", "prompt tokens written to a provider cache",
      semconv=True),
    V("gen_ai.usage.reasoning.output_tokens", "int", "tokens", "output tokens spent reasoning", semconv=True),
    V("llmtrace.ttft_ms", "float", "ms", "time from the request to the first output token", column="ttft_ms", summary=6),
    V("llmtrace.tpot_ms", "float", "ms", "mean time per output token after the first", column="tpot_ms", summary=7),
    # the same latencies in the names an OTLP backend reads off engine spans (vLLM's and SGLang's request span,
    # in seconds), written when the pass ends (recording.PassSpan.end); the pass also carries
    # gen_ai.response.time_to_first_chunk, the semantic conventions' TTFT (declared with gen.streaming)
    V("gen_ai.latency.time_to_first_token", "float", "s", "llmtrace.ttft_ms in seconds, under vLLM's and "
      "SGLang's name", when="when the pass has a time to first token"),
    V("gen_ai.latency.time_in_queue", "float", "s", "llmtrace.admission.queue_wait_ms in seconds, under vLLM's "
      "and SGLang's name", when="when the server admitted the pass through its queue"),
    V("llmtrace.ttft.cpu_wait_ms", "float", "ms", "time before the first token that this side's threads were ready "
      "to run but waited for a CPU (Linux's run-queue wait: the calling thread on the client; the event loop and "
      "the engines' stepping threads on the bundled server; at most the TTFT): what a busier machine adds to it",
      when="on Linux"),
    V("llmtrace.status", "str", "", "ok, error or cancelled, and why, as the side that recorded it saw it", when="when a pass was cancelled"),
    V("llmtrace.server.span_id", "str", "", "the server's pass span, when the server named it in a header"),
    V("llmtrace.response.undecoded_encoding", "str", "", "content encoding the middleware could not decode", when="when the response's content encoding cannot be decoded"),
    V("llmtrace.adapter.fault", "str", "", "what went wrong inside the middleware (the call itself was untouched)", when="when the middleware itself failed (the call is untouched)"),
    V("llmtrace.response.unparsed_bytes", "int", "bytes", "response bytes the middleware could not parse", when="when response bytes could not be parsed"),
    V("llmtrace.client.retry_count", "int", "", "retries the SDK made before this answer", when="when the SDK retried"),
    V("llmtrace.unobserved_stages", "str[]", "", "stages that happened where this side cannot see them", when="on calls to a hosted provider, which hides its engine's stages"),
    # ── foreign spans (llmtrace collect) ─────────────────────────────────────────────────────
    V("llmtrace.mapped_from", "str", "", "which instrumentation's attribute names the collector read the span from", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.usage.cache_convention", "str", "", "how the usage block counted cached prompt tokens: included "
      "(OpenTelemetry GenAI: inside input_tokens), excluded (MLflow: input_tokens are the uncached ones, cache "
      "reads beside) or excluded_both (Anthropic's API, Bedrock: reads and writes both beside); the views add "
      "them back into prompt_tokens", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.latency.unit", "str", "", "the unit an engine's gen_ai.latency.* numbers were written in, told "
      "from the span (s: vLLM V0, SGLang; ns: vLLM V1)", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.ttft.source", "str", "", "the attribute or event the time to first token was read from, and its "
      "unit (gen_ai.latency.time_to_first_token/ns)", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.finish_reason", "str", "", "the finish reason on the one vocabulary (stop, length, tool_calls, "
      "content_filter, error, other), as the collector derived it", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.content_capture", "str", "", "the capture mode the collector applied to the span's prompt and output", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.finish_reasons.raw", "str", "", "the finish reasons exactly as the foreign instrumentation stored them", when="on foreign spans mapped by llmtrace collect"),
    V("llmtrace.join.by", "str", "", "how the collector put an engine's trace under the client call it served where "
      "no traceparent reached the engine: response_id (the client's gen_ai.response.id is the engine's request id)",
      when="on an engine's pass span joined to its client span by llmtrace collect"),
    V("llmtrace.join.key", "str", "", "the id both sides named (the client's response id, the engine's request id)",
      when="on an engine's pass span joined to its client span by llmtrace collect"),
    V("llmtrace.join.trace_id", "str", "", "the engine's own trace id before the join (what the engine's logs say)",
      when="on an engine's pass span joined to its client span by llmtrace collect"),
    V("llmtrace.join.parent_span_id", "str", "", "the engine pass span's own parent before the join",
      when="on an engine's pass span joined to its client span by llmtrace collect"),
    # ── usage: who measured it ───────────────────────────────────────────────────────────────
    V("llmtrace.usage.source", "str", "", "provider (reported), estimated (counted with a tokenizer) or none"),
    V("llmtrace.usage.requested", "bool", "", "true when the middleware asked a stream for its usage"),
    V("llmtrace.usage.reported", "bool", "", "true when the provider reported usage", when="false, when the provider reported no usage"),
    V("llmtrace.usage.estimated", "bool", "", "true when the token counts are estimates"),
    V("llmtrace.usage.estimated_input_tokens", "int", "tokens", "prompt tokens counted by the middleware", when="when the provider reported no usage and the middleware counted"),
    V("llmtrace.usage.estimated_output_tokens", "int", "tokens", "output tokens counted by the middleware", when="when the provider reported no usage and the middleware counted"),
    V("llmtrace.usage.estimator", "str", "", "how the estimate was made (which tokenizer)", when="when the provider reported no usage and the middleware counted"),
    V("llmtrace.usage.problems", "str[]", "", "impossible or inconsistent usage totals the provider reported", when="when the provider's usage totals do not add up"),
    # ── server / engine ──────────────────────────────────────────────────────────────────────
    V("llmtrace.replica.id", "str", "", "replica that served the pass", column="replica", summary=10),
    V("llmtrace.engine.boot_id", "str", "", "the serving process's lifetime: a new id each time the server "
      "starts, its engines' prefix caches empty", column="engine_boot"),
    V("llmtrace.admission.queue_wait_ms", "float", "ms", "time waiting for a running slot", column="queue_wait_ms", summary=11),
    V("llmtrace.engine.queue_wait_ms", "float", "ms", "time from the engine's arrival to its prefix lookup"),
    V("llmtrace.engine.status", "str", "", "how the engine ended the pass: ok, cancelled, error"),
    V("llmtrace.engine.ttft_ms", "float", "ms", "when the engine's first-token step ended, from the pass's start "
      "(with llmtrace.ttft_ms: the delivery part of the TTFT)"),
    V("llmtrace.batch.composition_hash", "str", "", "hash of the batch sizes the pass ran at",
      column="composition_hash"),
    V("llmtrace.routing.model_differs", "bool", "", "true when the model that answered is not the one asked for", when="when the model that answered is not the one asked for"),
    # ── meters and content ───────────────────────────────────────────────────────────────────
    V("llmtrace.meters.cost_usd", "float", "USD", "what this pass cost", column="cost_usd", summary=9),
    V("llmtrace.meters.trace_cost_usd", "float", "USD", "what the trace cost so far"),
    V("llmtrace.meters.usage_consistent", "bool", "", "false when the reported usage cannot add up"),
    V("llmtrace.prompt.hash", "str", "", "keyed hash of the rendered prompt (capture=hashes)", column="prompt_hash", summary=13),
    V("llmtrace.output.hash", "str", "", "keyed hash of the output text", column="output_hash", summary=14),
    V("llmtrace.prompt.segments", "str", "", "JSON list of the prompt's segments: kind, keyed hash, chars, chunk hashes "
      "(a chain over 64-char chunks), and for a segment of 512 chars or more its content-defined pieces "
      "(\"keyed hash:chars\", fewer than 512), which find text two prompts share after a changed block"),
    V("llmtrace.prompt.text", "str", "", "the rendered prompt (capture=full only, scrubbed)", when="capture=full only"),
    V("llmtrace.output.text", "str", "", "the output (capture=full only, scrubbed)", when="capture=full only"),
    V("llmtrace.output.shape", "str", "", "what the output looks like: json, fenced, xml or text"),
    V("llmtrace.output.parses", "bool", "", "whether a structured-looking output parses"),
    V("llmtrace.output.structured_guess", "bool", "", "true when the output looks structured though no format was asked"),
    V("llmtrace.output.asked_in_words", "str", "", "json or xml: the format the prompt asks for in words, with no "
      "response_format (read off the prompt in memory; none of its text is kept)",
      when="when a prompt asks for JSON or XML in words and sets no response_format"),
)

# Families of names copied through as the provider sent them (the suffix is the provider's own field)
PASS_VALUE_FAMILIES: tuple[tuple[str, str], ...] = (
    ("llmtrace.usage.raw.", "the provider's usage fields exactly as reported (the suffix is its own name)"),
)

# Columns of the views that are not a span value of their own: ids, times, and what the views derive.
# (A column that shows a declared value takes its meaning from that value's ``column``.)
VIEW_COLUMNS: dict[str, str] = {
    "trace_id": "trace id, 32 lowercase hex characters as in a W3C traceparent",
    "span_id": "span id, 16 lowercase hex characters",
    "parent_span_id": "the parent span's id (NULL for a root span)",
    "pass_span_id": "span id of the pass the row belongs to",
    "client_span_id": "the client's pass span of this logical pass (NULL when only the server saw it)",
    "server_span_id": "the server's pass span of this logical pass (NULL when the server is not ours)",
    "observed_by": "which sides recorded the pass: both, client or server",
    "name": "span name (a stage id, chat {model}, execute_tool {name}, ...)",
    "kind": "OpenTelemetry span kind",
    "stage": "stage id from the registry (NULL for spans that are not stages)",
    "phase": "phase of the stage",
    "stage_number": "the stage's position in the pipeline, 1-42",
    "title": "the stage's title",
    "service": "service.name of the process that recorded the span",
    "deploy": "deploy (service.version) the span was recorded under; on passes, the trace's",
    "ts": "start time as a timestamp (UTC)",
    "start_ns": "start, nanoseconds since the epoch",
    "end_ns": "end, nanoseconds since the epoch",
    "duration_ms": "span length in milliseconds (for an envelope stage, not its own time: see time_breakdown)",
    "status": "ok, error or cancelled",
    "status_message": "why the span ended in error or was cancelled",
    "attributes": "every span value, as JSON",
    "resource": "the recording process's resource attributes, as JSON",
    "events": "span events, as JSON",
    "boundary_values": "the stage's values (its attributes), as JSON",
    "hit_ratio": "cached_tokens / prompt_tokens",
    "finish_reason_raw": "the finish reason as the provider spelt it (finish_reason is normalised)",
    "client_prompt_tokens": "prompt tokens as the client counted them, beside the server's count",
    "spans": "spans in the trace",
    "passes": "inference passes in the trace",
    "tool_calls": "tool calls in the trace",
    "services": "services that took part in the trace",
    "has_error": "true when any span of the trace ended in error",
    "root_name": "name of the trace's root span",
    "exclusive_ms": "the stage's own time in the pass (llmtrace.stage.self_ms), or the part's time on a client pass",
    "share": "exclusive_ms (or ms) as a share of the pass's wall clock (or its TTFT); a pass's shares sum to 1",
    "component": "part of the time to first token: queue, routing, intake, cache_lookup, prefill, first_token, "
                 "batching, delivery, other, detokenizer_holdback",
    "ms": "milliseconds of the TTFT spent in the component",
    "at_ns": "when the deploy was marked, nanoseconds since the epoch",
    "note": "free text given with the deploy mark",
    "key": "setting name",
    "value": "setting value",
}

# One row of a request list (the explorer's request table reads a pass by these; tui/data/records.py
# RequestRow has a field each): ``requests`` view columns, each one of VIEW_COLUMNS or a value's ``column``
# (stages.py checks that when the registry loads).
REQUEST_ROW: tuple[str, ...] = (
    "trace_id", "span_id", "start_ns", "side", "service", "model", "replica", "deploy", "prompt_tokens",
    "cached_tokens", "hit_ratio", "ttft_ms", "tpot_ms", "output_tokens", "finish_reason", "status", "cost_usd",
    "duration_ms",
)
