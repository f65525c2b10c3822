"""Turning a finished call into the pass span's summary values and the stage spans a client can see.

Only what the wire showed is recorded: connection reuse, first byte, first chunk / content / tool-call
token, inter-chunk gaps, requested sampling values, usage as reported, finish reasons. Stages the
provider hides are marked unobserved, never filled with guesses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtrace.adapters.middleware import cache_diagnostics, usage_source, wire
from llmtrace.adapters.middleware.call_record import CallRecord
from llmtrace.tracer import capture
from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading import evidence_shape, segments, stop_context, textscan, volatile
from llmtrace.tracer.record import prices
from llmtrace.tracer.record import usage as usage_mod
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.finish_reason import normalize_finish_reason

if TYPE_CHECKING:
    from llmtrace.adapters.middleware.observation import Observation

_TRUNCATING = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
# provider words that already tell a stop string from the end of the turn (Anthropic's stop_reason)
_SAYS_WHICH = frozenset({"end_turn", "stop_sequence", "tool_use", "max_tokens", "refusal", "pause_turn"})


def _ms(a: int, b: int) -> float:
    return round((b - a) / 1e6, 3)


def _percentile(sorted_vals: list[int], q: float) -> int:
    # Nearest-rank percentile: no interpolation, so the reported gap is one that really happened.
    idx = min(len(sorted_vals) - 1, max(0, int(q * len(sorted_vals) + 0.999999) - 1))
    return sorted_vals[idx]


@dataclass(slots=True)
class _Emit:
    """What every part of one call's emission reads: the call, its usage, its output text and its clocks."""

    call: CallRecord
    end: int
    usage: usage_mod.Usage | None
    out_text: str | None

    @property
    def obs(self) -> Observation:
        return self.call.obs

    def wall(self, ns: int) -> int:
        return self.call.wall(ns)

    def stage(self, stage_id: str, start: int, end: int, values: dict[str, object]) -> None:
        """A stage span between two monotonic instants of this call, under its pass span."""
        rec.record_stage(stage_id, start_ns=self.wall(start), end_ns=self.wall(end), values=values,
                         parent=self.call.pass_span)

    def at_request(self, stage_id: str, values: dict[str, object]) -> None:
        # What the request alone shows has no duration of its own: a point stage at the call's start.
        self.stage(stage_id, self.call.t0, self.call.t0, values)


def emit_stages(call: CallRecord) -> None:
    """Everything the wire showed about one finished call, phase by phase in pipeline order."""
    end = call.end
    obs = call.obs
    usage = usage_mod.normalise(call.usage_style, obs.usage_raw) if obs.usage_raw is not None else None
    e = _Emit(call, end, usage, obs.output_text if (obs.output_parts or obs.done) else None)
    hidden = _summary(e)
    _arrival(e)
    _intake(e)
    _requested_generation(e)
    _cache(e)
    _streaming(e)
    _stop(e)
    _meters(e)
    wire.conversation_stages(call, e.wall(end))
    for stage_id in hidden:
        rec.mark_unobserved(stage_id, reason="the provider does not expose this stage to a client",
                            parent=call.pass_span)


def _summary(e: _Emit) -> tuple[str, ...]:
    """The pass span's own values; returns the stages the provider hides (marked unobserved at the end)."""
    call, obs, usage, t0, out_text = e.call, e.obs, e.usage, e.call.t0, e.out_text
    summary: dict[str, object] = {
        N.GEN_AI_REQUEST_TEMPERATURE: obs.temperature,
        N.GEN_AI_REQUEST_TOP_P: obs.top_p,
        N.GEN_AI_REQUEST_TOP_K: obs.top_k,
        N.GEN_AI_REQUEST_SEED: obs.seed,
        N.GEN_AI_REQUEST_MAX_TOKENS: obs.max_tokens,
        N.STREAM_REQUESTED: obs.stream,
        N.GEN_AI_RESPONSE_MODEL: obs.response_model,
        N.GEN_AI_RESPONSE_ID: obs.response_id,
        N.GEN_AI_OUTPUT_TYPE: obs.output_type,
        N.SERVER_ADDRESS: call.host,
        N.SERVER_PORT: call.port,
        sc.HTTP_RESPONSE_STATUS_CODE: call.status_code or None,
        N.CLIENT_RETRY_COUNT: call.retry or None,
    }
    if obs.finish_reasons:
        summary[N.GEN_AI_RESPONSE_FINISH_REASONS] = list(obs.finish_reasons)
    if obs.response_model and obs.response_model != obs.model:
        summary[N.ROUTING_MODEL_DIFFERS] = True
    out_text = obs.output_text if (obs.output_parts or obs.done) else None
    if call.usage_requested:
        summary[N.USAGE_REQUESTED] = True  # include_usage added by the middleware
    if usage is not None:
        summary.update(usage.attributes())
        summary[N.USAGE_SOURCE] = usage_source.PROVIDER
        summary[N.USAGE_ESTIMATED] = False
    else:
        summary[N.USAGE_REPORTED] = False
        if call.status_code and call.status_code < 400 and not call.undecoded:
            summary.update(usage_source.estimated_attributes(obs.segments, out_text, call.opts.tokenizer))
        else:
            summary[N.USAGE_SOURCE] = usage_source.NONE
    first_token = min((t for t in (obs.first_content_ns, obs.first_tool_ns) if t), default=0)
    if first_token:
        summary[N.TTFT_MS] = _ms(t0, first_token)
        if call.ttft_wait is not None:
            summary[N.TTFT_CPU_WAIT_MS] = round(call.ttft_wait / 1e6, 3)
        if (
            usage is not None
            and usage.output_tokens
            and usage.output_tokens > 1
            and obs.last_token_ns > first_token
        ):
            summary[N.TPOT_MS] = round(
                (obs.last_token_ns - first_token) / 1e6 / (usage.output_tokens - 1), 3
            )
    if call.undecoded:
        summary[N.RESPONSE_UNDECODED_ENCODING] = call.undecoded
    if call.body_overflow:
        summary[N.RESPONSE_UNPARSED_BYTES] = call.body_overflow
    if capture.mode() != "none":
        summary.update(segments.capture_attributes(obs.segments, out_text,
                                                   None if out_text is None else obs.turn.text(), obs.turns))
    # An llmtrace backend records the engine stages on its own pass span (a child of this one); only a
    # provider that answered and hides them gets them marked unobserved here (no answer: nothing ran).
    hidden = () if call.server_span or not call.status_code else call.opts.hidden_stages
    if call.server_span:
        summary[N.SERVER_SPAN_ID] = call.server_span
    if hidden:
        summary[N.UNOBSERVED_STAGES] = list(hidden)
    call.pass_span.set_many(summary)
    return tuple(hidden)


def _arrival(e: _Emit) -> None:
    """The connection (opened or reused) and the stream's first byte."""
    call, obs, t0, t0w, wall, parent = e.call, e.obs, e.call.t0, e.call.t0_wall, e.wall, e.call.pass_span
    conn = call.conn
    cvals: dict[str, object] = {N.SERVER_ADDRESS: call.host, N.SERVER_PORT: call.port}
    c_end = t0
    if conn.connect_start:
        c_end = conn.connect_end or conn.connect_start
        cvals[N.CONNECTION_REUSED] = False
        cvals[N.CONNECTION_CONNECT_MS] = _ms(conn.connect_start, c_end)
    elif conn.saw_http:
        cvals[N.CONNECTION_REUSED] = True
        cvals[N.CONNECTION_CONNECT_MS] = 0.0
    rec.record_stage(S.ARRIVAL_CONNECTION, start_ns=t0w, end_ns=wall(c_end), values=cvals, parent=parent)
    if call.t_headers:
        rec.record_stage(
            S.ARRIVAL_STREAM_SETUP,
            start_ns=t0w,
            end_ns=wall(call.t_headers),
            parent=parent,
            values={
                N.STREAM_REQUESTED: obs.stream,
                N.STREAM_PROTOCOL: "sse" if call.streamed else "none",
                N.STREAM_FIRST_BYTE_MS: _ms(t0, call.t_headers),
            },
        )


_NOT_EVIDENCE = ("tools", "history:assistant")


def _intake(e: _Emit) -> None:
    """What the request itself shows: the system prompt's volatile field, characters that normalise away."""
    obs, at_request = e.obs, e.at_request
    if obs.system_text is not None:
        off, kind = volatile.first_volatile(obs.system_text)
        at_request(
            S.INTAKE_SYSTEM_PROMPT,
            {
                N.SYSTEM_CHARS: len(obs.system_text),
                N.SYSTEM_HASH: capture.hash_text(obs.system_text)
                if capture.mode() != "none"
                else None,
                N.SYSTEM_VOLATILE_OFFSET: off,
                N.SYSTEM_VOLATILE_KIND: kind,
            },
        )
    if capture.mode() != "none":
        # Retrieved passages pasted into the prompt: their shape only (counts, schemes), never their text.
        # Not the tools (the app's own definitions, one JSON line) nor the model's own answers.
        # The segment's kind goes with it: a fixed block in the system prompt is the app's own reference text.
        found = evidence_shape.read([(kind, t) for kind, t in obs.segments if kind not in _NOT_EVIDENCE])
        if found is not None:
            at_request(S.INTAKE_EVIDENCE_FORMATTING, evidence_shape.values(*found))
    counts = [textscan.count_chars(text) for _, text in obs.segments]
    if any(c.hidden or c.nbsp or c.confusables for c in counts):
        # Only when there is something to say: a clean prompt costs no span (the server records the stage).
        at_request(
            S.INTAKE_NORMALIZATION,
            {
                N.NORMALIZATION_FORM: "none",
                N.NORMALIZATION_STRIP: False,
                N.NORMALIZATION_CHARS_CHANGED: 0,
                N.NORMALIZATION_INVISIBLE_CHARS: sum(c.hidden for c in counts),
                N.NORMALIZATION_NBSP: sum(c.nbsp for c in counts),
                N.NORMALIZATION_CONFUSABLES: sum(c.confusables for c in counts),
            },
        )


def _requested_generation(e: _Emit) -> None:
    """The sampling, penalty and reasoning values the request asked for (the provider's own are hidden)."""
    obs, usage, at_request = e.obs, e.usage, e.at_request
    at_request(
        S.GEN_SAMPLING,
        {
            N.GEN_AI_REQUEST_TEMPERATURE: obs.temperature,
            N.GEN_AI_REQUEST_TOP_P: obs.top_p,
            N.GEN_AI_REQUEST_TOP_K: obs.top_k,
            N.GEN_AI_REQUEST_SEED: obs.seed,
            N.SAMPLING_GREEDY: (obs.temperature == 0.0) if obs.temperature is not None else None,
            N.REQUESTED_ONLY: True,
        },
    )
    if obs.frequency_penalty is not None or obs.presence_penalty is not None:
        at_request(
            S.GEN_PENALTIES,
            {
                N.GEN_AI_REQUEST_FREQUENCY_PENALTY: obs.frequency_penalty,
                N.GEN_AI_REQUEST_PRESENCE_PENALTY: obs.presence_penalty,
                # a penalty sent as 0 (off) runs on nothing: only a penalty that bends scores counts
                N.PENALTIES_ON_STRUCTURED_OUTPUT: obs.output_type == "json" and bool(obs.frequency_penalty
                                                                                    or obs.presence_penalty)
                if obs.output_type
                else None,
            },
        )
    if obs.reasoning_budget is not None or (usage is not None and usage.reasoning_tokens is not None):
        at_request(
            S.GEN_REASONING_BUDGET,
            {
                N.REASONING_BUDGET: obs.reasoning_budget,
                N.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens
                if usage is not None
                else None,
            },
        )


def _cache(e: _Emit) -> None:
    """What the provider reported of its cache, and where this prompt parts from the last of its template."""
    call, obs, usage, t0, t0w, wall, parent = e.call, e.obs, e.usage, e.call.t0, e.call.t0_wall, e.wall, e.call.pass_span
    prefix = wire.prefix_values(call)
    prefix.update(cache_diagnostics.values(obs.cache_diagnosis))
    if usage is not None and usage.cache_read_tokens is not None:
        prefix[N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = usage.cache_read_tokens
        prefix[N.PREFIX_HIT_TOKENS] = usage.cache_read_tokens
        prefix[N.PREFIX_SOURCE] = "provider_reported"
    if prefix:
        rec.record_stage(
            S.CACHE_PREFIX_MATCH, start_ns=t0w, end_ns=wall(call.t_headers or t0), parent=parent, values=prefix
        )


def _streaming(e: _Emit) -> None:
    """Chunk timing as the app saw it: first chunk, content and tool call, inter-chunk gaps."""
    call, obs, t0, wall, parent = e.call, e.obs, e.call.t0, e.wall, e.call.pass_span
    times = call.times
    if call.streamed and len(times):
        gaps = sorted(times[i] - times[i - 1] for i in range(1, len(times)))
        svals: dict[str, object] = {
            N.STREAM_CHUNKS: len(times),
            N.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: round((times[0] - t0) / 1e9, 6),
            N.STREAM_FIRST_BYTE_MS: _ms(t0, call.t_headers) if call.t_headers else None,
            N.STREAM_FIRST_CONTENT_MS: _ms(t0, obs.first_content_ns)
            if obs.first_content_ns
            else None,
            N.STREAM_FIRST_TOOL_CALL_MS: _ms(t0, obs.first_tool_ns) if obs.first_tool_ns else None,
            N.STREAM_CONTENT_CHUNKS: obs.content_chunks,
        }
        if gaps:
            svals[N.STREAM_ITL_P50_MS] = round(_percentile(gaps, 0.5) / 1e6, 3)
            svals[N.STREAM_ITL_P99_MS] = round(_percentile(gaps, 0.99) / 1e6, 3)
        if call.stream_overflowed:
            svals[N.STREAM_PARSE_STOPPED] = True
        rec.record_stage(
            S.GEN_STREAMING, start_ns=wall(times[0]), end_ns=wall(times[-1]), values=svals, parent=parent
        )


def _stop(e: _Emit) -> None:
    """How the output ended: finish reason, the length cap, whether structured output parses."""
    obs, usage, out_text, span, wall, end, parent = e.obs, e.usage, e.out_text, e.call.pass_span, e.wall, e.end, e.call.pass_span
    # Whether the output was cut and whether it parses go on gen.stop. safety.stop_reason is left to
    # the app (stop_reason.check_stop): only the app knows whether it read the reason, and the
    # broken-JSON analyzer takes a safety.stop_reason span as proof that it did.
    # An answer that called tools is a tool call (as the collector records one, otlp_segments.py): its shape
    # is its words' shape, not its arguments' (a cut call's partial arguments are the truncation analyzer's
    # to judge, by whether the app sent them back; two parallel calls' arguments never parse as one text).
    called = obs.tool_calls > 0 and obs.output_type is None
    shape = wire.output_values("tool_calls" if called else obs.output_type,
                               (obs.turn.words() if called else out_text) if obs.output_parts else None,
                               obs.segments)
    if shape:
        span.set_many(shape)
    ended = _end_values(obs, out_text)
    if obs.finish_reasons or usage is not None or shape or ended[N.STOP_KIND] == "client_disconnect":
        parse_ok = None
        if obs.output_type == "json" and out_text is not None:
            try:
                json.loads(out_text)
                parse_ok = True
            except ValueError:
                parse_ok = False
        rec.record_stage(
            S.GEN_STOP,
            start_ns=wall(end),
            end_ns=wall(end),
            parent=parent,
            values={
                N.GEN_AI_RESPONSE_FINISH_REASONS: list(obs.finish_reasons) or None,
                N.STOP_MATCHED: obs.stop_sequence,
                N.GEN_AI_REQUEST_MAX_TOKENS: obs.max_tokens,
                N.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens if usage is not None else None,
                N.STOP_TRUNCATED: any(r in _TRUNCATING for r in obs.finish_reasons),
                N.STOP_OUTPUT_PARSES: parse_ok,
                **shape,
                **ended,
            },
        )


def _end_values(obs: Observation, out_text: str | None) -> dict[str, object]:
    """How the answer ended, read from what the client saw (tracer/reading/stop_context.py): Anthropic names the
    stop sequence that ended a message, vLLM-like servers too (``stop_reason``); OpenAI says "stop" for both a
    stop string and the end of the turn, so with stop strings set that is ``stop_unknown`` and the classes of
    the output's end are still recorded (the analyzer weighs them). Only classes and offsets: never text."""
    raw = obs.finish_reasons[-1] if obs.finish_reasons else None
    canonical = normalize_finish_reason(raw)
    named = obs.stop_sequence if obs.stop_sequence else None
    said_which = raw in _SAYS_WHICH or named is not None
    if obs.provider_failed:
        kind = "error"
    elif raw is None and obs.stream and not obs.done:
        kind = "client_disconnect"  # the stream ended (the app stopped reading) before the provider said why
    else:
        kind = stop_context.end_kind(canonical, matched_stop_string=named is not None or raw == "stop_sequence",
                                     stop_strings_set=bool(obs.stop), said_which=said_which)
    stops = list(dict.fromkeys(obs.stop))
    stop = named if named is not None else (stops[0] if kind == "stop_unknown" and len(stops) == 1 else None)
    # what the middleware parsed of the answer's text (a tool call's arguments are not an answer's end)
    text = out_text if obs.output_parts and obs.tool_calls == 0 else ("" if obs.tool_calls == 0 else None)
    return stop_context.stop_values(text, kind, stop, len(stops))


def _meters(e: _Emit) -> None:
    """Cache accounting and cost from the provider's usage."""
    call, obs, usage, span, wall, end, parent = e.call, e.obs, e.usage, e.call.pass_span, e.wall, e.end, e.call.pass_span
    if usage is None:
        return
    values = prices.accounting_values(
        obs.response_model, usage, obs.model, call.opts.provider or call.provider
    )
    values[N.USAGE_SOURCE] = usage_source.PROVIDER
    values[N.USAGE_ESTIMATED] = False
    rec.record_stage(
        S.METERS_CACHE_ACCOUNTING, start_ns=wall(end), end_ns=wall(end), values=values, parent=parent
    )
    cost = values[N.METERS_COST_USD]
    if isinstance(cost, float):
        span.set(N.METERS_COST_USD, cost)
        span.set(N.METERS_TRACE_COST_USD, prices.trace_costs.add(span.trace_id, cost))
