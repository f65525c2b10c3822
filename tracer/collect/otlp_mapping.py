"""Spans from other instrumentations, mapped onto llmtrace's stage model where their data allows.

The raw attributes are always kept; mapping only *adds* the names the store's views read
(``gen_ai.usage.input_tokens``, ``llmtrace.ttft_ms``, ...), sets the operation/stage/phase columns, and for
vLLM's request span synthesizes the observed stage rows its latency breakdown implies. Shapes handled:

- OpenTelemetry GenAI semantic conventions v1.41 (``gen_ai.provider.name``, ``gen_ai.usage.input_tokens``)
  and the older names (``gen_ai.system``, ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``,
  OpenLLMetry's ``llm.request.type``);
- OpenInference (``openinference.span.kind``, ``llm.model_name``, ``llm.token_count.*``);
- vLLM's ``llm_request`` span (``gen_ai.latency.time_in_queue`` / ``time_to_first_token`` /
  ``time_in_model_prefill`` / ``time_in_model_decode``, all in seconds).

Prompt and output text in foreign spans follows the collector's capture mode, as the app's own spans do.

What the packages installed here really send (each calling ``llmtrace serve``, tests/collector/
test_foreign_diagnosis.py), and so what the analyzers get:

- opentelemetry-instrumentation-openai-v2 2.4b0: model, tokens, finish reasons (on streamed calls only
  inside ``gen_ai.output.messages``, so only with content capture on); no
  cached tokens, no TTFT, no server address, no tool definitions, no span at all for the Responses API;
  messages only with
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``. Cache findings are then estimated from
  the prompts ("token ~N"); without the switch nothing about the cache can be told.
- OpenLLMetry (opentelemetry-instrumentation-openai 0.62): tokens, cached tokens, finish reasons (streamed
  too), TTFT from its first chunk event, ``api_base``, tool definitions, messages unless
  ``TRACELOOP_TRACE_CONTENT=false``; Responses-API spans only for streamed calls.
- OpenInference (openinference-instrumentation-openai): tokens, cached tokens, ``llm.finish_reason``, TTFT
  from its first-token event (set on the first chunk, which llmtrace serve, like OpenAI and vLLM, sends with
  the first token), ``llm.tools.*``, messages unless ``OPENINFERENCE_HIDE_INPUTS``; no address.
  On the Responses API the finish reason is only in ``output.value`` (buffered calls; streams carry no
  body and no usage).
- LiteLLM's ``otel`` callback: tokens, finish reasons as the string ``'["length"]'``, cached tokens only
  inside ``metadata.usage_object`` (a Python repr), ``api_base`` inside ``hidden_params``, and a
  ``raw_gen_ai_request`` span with the provider's request and response bodies field by field; no TTFT.
- A refused call (400, 429): the span's status is an error and its message ("Error code: 429 - ...") is the
  only place the HTTP status is; it becomes ``http.response.status_code``. OpenInference's and LiteLLM's
  content switches write a marker (``__REDACTED__``, ``redacted-by-litellm``) where the text was: kept, not
  hashed. LiteLLM with message logging off names no operation (``llm.request.type=completion``): chat.
- With no prompt content but cached tokens (the switches above off), prompts prefilled again are one
  ``info`` finding that names the switch; the field and its position cannot be told.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from llmtrace.tracer.collect.otlp_conversation import conversation_rows
from llmtrace.tracer.collect.otlp_cost import accounting_values
from llmtrace.tracer.collect.otlp_engines import (
    PhaseLedger,
    is_engine_span,
    map_engine_span,
    request_latencies,
)
from llmtrace.tracer.collect.otlp_names import (
    EXCLUDED,
    EXCLUDED_BOTH,
    TTFT_KEYS,
    USAGE_OBJECT_KEYS,
    flat_convention,
    number,
    ttft_ms,
    usage_block,
)
from llmtrace.tracer.collect.otlp_penalties import penalty_values, raw_penalty_values
from llmtrace.tracer.collect.otlp_reasons import (
    body_reasons,
    event_reasons,
    http_status,
    message_reasons,
    reason_list,
)
from llmtrace.tracer.collect.otlp_rows import ExtraRow, Mapped, stage_row
from llmtrace.tracer.collect.otlp_segments import (
    answer_text,
    evidence_values,
    messages,
    output_attributes,
    segment_attributes,
)
from llmtrace.tracer.collect.otlp_stop import stop_row
from llmtrace.tracer.collect.otlp_tools import tool_values
from llmtrace.tracer.reading.conversations import Conversations
from llmtrace.tracer.record import capture
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.finish_reason import normalize_finish_reason
from llmtrace.tracer.registry.stages import get_stage

__all__ = ["ExtraRow", "Mapped", "Mapper", "is_content"]
_USAGE_SET = frozenset(USAGE_OBJECT_KEYS)

GENAI_OPS = frozenset({"chat", "text_completion", "generate_content", "embeddings", "execute_tool",
                       "create_agent", "invoke_agent", "retrieval"})
# Attribute keys (or key prefixes) that carry prompt/output text in other instrumentations.
CONTENT_PREFIXES = ("gen_ai.prompt", "gen_ai.completion", "gen_ai.input.messages", "gen_ai.output.messages",
                    "gen_ai.system_instructions", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
                    "input.value", "output.value", "traceloop.entity.input", "traceloop.entity.output",
                    "llm.input_messages", "llm.output_messages", "llm.prompts", "llm.prompt_template.variables",
                    "retrieval.documents", "gen_ai.content.",
                    # tool definitions are part of the prompt (OTel GenAI, OpenInference, OpenLLMetry's older names)
                    "gen_ai.tool.definitions", "llm.tools.", "llm.request.functions.")
# LiteLLM's ``raw_gen_ai_request`` span writes the provider's request and response bodies field by field as
# ``llm.<provider>.<field>``: every text-bearing value there (messages, system, choices, content, tools,
# the stringified response) is prompt or output, whatever the field is called.
_RAW_PAYLOAD_SPANS = frozenset({"raw_gen_ai_request"})
_RAW_CONTENT_FIELDS = frozenset({"messages", "system", "prompt", "input", "contents", "content", "choices",
                                 "tools", "stringified_raw_response", "candidates", "output", "instructions"})
# What instrumentations write in place of text their content switch hid (OpenInference's
# OPENINFERENCE_HIDE_INPUTS / _OUTPUTS, LiteLLM's turn_off_message_logging): no text, so no hash.
_REDACTED = frozenset({"__REDACTED__", "redacted-by-litellm"})
_INPUT_KEYS = ("gen_ai.input.messages", "input.value", "gen_ai.prompt", "gen_ai.prompt.0.content")
_OUTPUT_KEYS = ("gen_ai.output.messages", "output.value", "gen_ai.completion", "gen_ai.completion.0.content")
_OI_KIND_OPS = {"LLM": "chat", "TOOL": "execute_tool", "EMBEDDING": "embeddings", "RETRIEVER": "retrieval",
                "AGENT": "invoke_agent"}
_TRACELOOP_OPS = {"tool": "execute_tool", "agent": "invoke_agent"}  # traceloop.span.kind
_OPENLLMETRY_OPS = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings",
                    "rerank": None, "unknown": None}
_TOOL_STAGE = S.LOOP_TOOL_DISPATCH
_MLFLOW_KIND = "mlflow.spanType"  # MLflow's own spans (its chat models: CHAT_MODEL, LLM)
# Where instrumentations put the finish reason(s): OTel GenAI (a list), OpenInference (``llm.finish_reason``),
# OpenLLMetry's older per-choice names, LiteLLM (a list serialised into a string).
_FINISH_KEYS = (N.GEN_AI_RESPONSE_FINISH_REASONS, "llm.finish_reason", "gen_ai.response.finish_reason",
                "llm.response.finish_reason", "gen_ai.completion.0.finish_reason",
                "llm.output_messages.0.message.finish_reason")
_FINISH_SET = frozenset((*_FINISH_KEYS, "output.value", "gen_ai.output.messages"))
# Time to first token: every attribute spelling and its unit is one row of otlp_names.TTFT_SPELLINGS.
# Span events that mark the first streamed token: OpenInference's, OpenLLMetry's per-chunk events.
_FIRST_TOKEN_EVENTS = frozenset({"First Token Stream Event", "first_token", "gen_ai.first_token"})
_CHUNK_EVENTS = frozenset({"gen_ai.content.completion.chunk", "llm.content.completion.chunk"})  # one per chunk


def _put(attrs: dict[str, object], key: str, value: object) -> None:
    """Add a normalized name without overwriting what the span already says."""
    if value is not None and key not in attrs:
        attrs[key] = value


_num = number  # a finite number, or None: NaN, inf and "1e400" (which float() reads as inf) are not numbers here


def _int(value: object) -> int | None:
    n = _num(value)
    return int(n) if n is not None and abs(n) < 2**63 else None


def is_content(key: str, value: object, raw_payload: bool = False) -> bool:
    """Whether an attribute holds prompt or output text (then it follows the capture mode)."""
    if key.startswith(CONTENT_PREFIXES):
        return True
    if isinstance(value, (bool, int, float)) or value is None:
        return False  # counts and settings: llm.token_count.prompt, llm.openai.max_tokens
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "llm" and parts[1] != "token_count":
        return parts[2] in _RAW_CONTENT_FIELDS or (raw_payload and parts[2] == "extra_body")
    return False


# Attribute keys seen on a span and never content whatever their value (a count, an id, a model name): a
# span whose keys are all here is copied as it is, with no per-key test (most engine and router spans).
# Bounded: keys past the cap are tested each time, as before.
_NEVER_CONTENT: set[str] = set()
_NEVER_CONTENT_CAP = 65536


def _never_content(key: str) -> bool:
    """Whether ``is_content`` is False for this key whatever the value and payload kind."""
    if key.startswith(CONTENT_PREFIXES):
        return False
    parts = key.split(".")
    return not (len(parts) == 3 and parts[0] == "llm" and parts[1] != "token_count")


# Where the endpoint's URL is (the cache analysis tells a hosted provider from a self-hosted server by it):
# OpenLLMetry's api_base, HTTP conventions, LiteLLM's hidden_params JSON.
_URL_KEYS = ("gen_ai.openai.api_base", "url.full", "http.url", "llm.api_base")
# Cached prompt tokens under the names instrumentations use; LiteLLM only has them inside its usage object,
# written as a Python repr ({'prompt_tokens_details': {'cached_tokens': 176}}).
_CACHED_KEYS = ("gen_ai.usage.cache_read_input_tokens", "llm.usage.cache_read_input_tokens",
                "gen_ai.usage.prompt_tokens_details.cached_tokens", "gen_ai.usage.input_tokens_details.cached_tokens",
                "llm.token_count.prompt_details.cache_read")
# Prompt tokens written to the cache (Anthropic's cache_creation_input_tokens): OpenInference, OpenLLMetry.
_CACHE_WRITE_KEYS = ("llm.token_count.prompt_details.cache_write", "gen_ai.usage.cache_creation_input_tokens",
                     "llm.usage.cache_creation_input_tokens", "gen_ai.usage.cache_write_input_tokens")
_URL_SET = frozenset((*_URL_KEYS, "hidden_params"))
_CACHED_SET = frozenset((*_CACHED_KEYS, "metadata.usage_object"))
_CACHE_WRITE_SET = frozenset((*_CACHE_WRITE_KEYS, "metadata.usage_object"))
_REPR_CACHE_WRITE = re.compile(r"""['"]cache_creation_input_tokens['"]\s*:\s*(\d+)""")
_REPR_CACHED = re.compile(r"""['"](?:cached_tokens|cache_read_input_tokens)['"]\s*:\s*(\d+)""")


def _host(raw: dict[str, object]) -> str | None:
    try:
        return _host_of(raw)
    except ValueError:  # a URL urlsplit refuses ('http://[::1'): no host, the span is still stored
        return None


def _host_of(raw: dict[str, object]) -> str | None:
    for key in _URL_KEYS:
        v = raw.get(key)
        if isinstance(v, str) and v:
            host = urlsplit(v if "//" in v else "//" + v).hostname
            if host:
                return host
    hidden = raw.get("hidden_params")
    if isinstance(hidden, str) and '"api_base"' in hidden:
        try:
            base = json.loads(hidden).get("api_base")
        except (ValueError, AttributeError):
            return None
        if isinstance(base, str) and base:
            return urlsplit(base).hostname
    return None


def _cached(raw: dict[str, object], keys: tuple[str, ...] = (), in_repr: re.Pattern[str] | None = None) -> int | None:
    """Cached (by default) or cache-written prompt tokens, under the keys instrumentations use or inside
    LiteLLM's usage repr."""
    for key in keys or _CACHED_KEYS:
        value = raw.get(key)
        if value is not None:
            n = _int(value)
            if n is not None:
                return n
    usage = raw.get("metadata.usage_object")
    if isinstance(usage, str):
        m = (in_repr or _REPR_CACHED).search(usage)
        if m:
            return int(m.group(1))
    return None


def _first_token_ns(events: Any) -> int | None:  # a span's repeated OTLP Event (protobuf, untyped)
    """When the first token came: OpenInference's first-token event, or OpenLLMetry's first chunk event (it
    marks every streamed chunk). An OpenAI-protocol stream opens with a role chunk that OpenAI, vLLM and
    llmtrace serve send with the first token, so the first chunk is the first token's time; the second can be
    the stream's end (a tool call held back and sent whole)."""
    for e in events or ():
        if e.name in _CHUNK_EVENTS or e.name in _FIRST_TOKEN_EVENTS:
            return int(e.time_unix_nano)
    return None


class Mapper:
    """Maps one decoded span; returns None for llmtrace's own spans and for spans it does not recognise."""

    def __init__(self, capture_mode: str = "hashes") -> None:
        if capture_mode not in ("none", "hashes", "full"):
            raise ValueError(f"capture mode must be none, hashes or full, got {capture_mode!r}")
        self.capture_mode = capture_mode
        self._raw_payload = False  # the span being mapped is a raw provider payload (LiteLLM's)
        self.conversations = Conversations()  # the middleware's conversation reading, one tracker per service
        self.ledger = PhaseLedger()  # engine stages already given a row, router facts by trace
        self._content = False  # the span being mapped carries prompt or output text (any key is_content)

    def map(self, name: str, kind: str, attrs: dict[str, object], trace_hex: str, span_hex: str,
            start_ns: int, end_ns: int, events: object = (), status_message: str | None = None,
            service: str | None = None, parent_hex: str | None = None, replica: str | None = None) -> Mapped | None:
        if N.SIDE in attrs or sc.LLMTRACE_STAGE in attrs:
            return None  # llmtrace's own spans already speak the stage model
        self._raw_payload = name in _RAW_PAYLOAD_SPANS
        if is_engine_span(name):  # an engine's or a router's own span (otlp_engines.py): one dict lookup
            engine = map_engine_span(name, attrs, self._protect(attrs), trace_hex, span_hex, parent_hex,
                                     start_ns, end_ns, self.ledger)
            if engine is not None:
                if engine.operation is not None:
                    _put(engine.attributes, N.REPLICA_ID, replica)  # the engine process's pod, instance or host
                    self._common(attrs, engine.attributes, start_ns, end_ns, events)
                elif not TTFT_KEYS.isdisjoint(attrs):  # a proxy's TTFT (llm-d's sidecar) on a span of its own
                    self._ttft(attrs, engine.attributes, start_ns, end_ns, events)
                return engine
        if "openinference.span.kind" in attrs:
            mapped = self._openinference(attrs)
        elif (N.GEN_AI_LATENCY_TIME_IN_QUEUE in attrs or N.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN in attrs
                or "gen_ai.latency.e2e" in attrs):
            mapped = self._vllm(name, attrs, span_hex, start_ns, end_ns)
            _put(mapped.attributes, N.REPLICA_ID, replica)  # the engine process's pod, instance or host
        elif (N.GEN_AI_OPERATION_NAME in attrs or "gen_ai.system" in attrs or N.GEN_AI_PROVIDER_NAME in attrs
                or N.GEN_AI_REQUEST_MODEL in attrs or "llm.request.type" in attrs or _MLFLOW_KIND in attrs):
            mapped = self._genai(name, kind, attrs, start_ns, end_ns)
        elif attrs.get("traceloop.span.kind") in _TRACELOOP_OPS:
            mapped = self._traceloop(attrs)
        elif any(is_content(k, v, self._raw_payload) for k, v in attrs.items()):
            # a shape we do not map (an OpenLLMetry workflow, a framework's chain span) still carries
            # prompt or output text: it follows the capture mode like every other span's
            return self._raw_penalties(Mapped(None, None, None, self._protect(attrs)), attrs, span_hex, start_ns)
        elif self._raw_payload:
            return self._raw_penalties(Mapped(None, None, None, dict(attrs)), attrs, span_hex, start_ns)
        else:
            return None
        self._common(attrs, mapped.attributes, start_ns, end_ns, events)
        if mapped.operation == "execute_tool" and self.capture_mode != "none":
            # loop or fan-out: the call's arguments and result as digests (otlp_tools.py), never their text
            mapped.attributes.update(tool_values(attrs, status_message))
        if status_message and sc.HTTP_RESPONSE_STATUS_CODE not in attrs:
            status = http_status(status_message, attrs.get(sc.ERROR_TYPE))
            if status is not None:
                mapped.attributes[sc.HTTP_RESPONSE_STATUS_CODE] = status
        if mapped.operation in ("chat", "text_completion", "generate_content"):
            penalties = penalty_values(attrs)  # the penalties the request asked for (numbers, any capture mode)
            if penalties:
                mapped.extra.append(self._row(span_hex, S.GEN_PENALTIES, start_ns, start_ns, penalties))
            ended = stop_row(attrs, mapped.attributes, status_message, self.capture_mode)  # how it ended (otlp_stop.py)
            if ended:
                mapped.extra.append(self._row(span_hex, S.GEN_STOP, end_ns, end_ns, ended))
            if self._content:  # the readers below read text only: an engine's pass span has none (ingest speed)
                self._text_rows(mapped, attrs, span_hex, start_ns, end_ns, service)
            accounting = accounting_values(mapped.attributes)  # its price, as the middleware's (otlp_cost.py)
            if accounting:
                mapped.attributes[N.METERS_COST_USD] = accounting[N.METERS_COST_USD]
                mapped.extra.append(self._row(span_hex, S.METERS_CACHE_ACCOUNTING, end_ns, end_ns, accounting))
        return mapped

    def _text_rows(self, mapped: Mapped, attrs: dict[str, object], span_hex: str, start_ns: int, end_ns: int,
                   service: str | None) -> None:
        """What the middleware reads off a pass's prompt and answer, read off a foreign span's text."""
        # the same prompt segments our own spans carry, so the cache analysis works on these too
        mapped.attributes.update(segment_attributes(attrs, self.capture_mode))
        for key, value in output_attributes(attrs).items():  # the answer's shape, as our middleware says it
            _put(mapped.attributes, key, value)
        evidence = evidence_values(attrs, self.capture_mode)  # retrieved passages pasted into the prompt
        if evidence:
            mapped.extra.append(self._row(span_hex, S.INTAKE_EVIDENCE_FORMATTING, start_ns, start_ns, evidence))
        # repeated tool calls and invisible characters in the history, as the middleware reads them
        for stage_id, values in conversation_rows(attrs, self.capture_mode):
            mapped.extra.append(self._row(span_hex, stage_id, start_ns, start_ns, values))
        # a history rewritten by a compaction, by the middleware's own reading (tracer/reading/conversations.py)
        compacted = self.conversations.compaction(service, messages(attrs), end_ns) if self.capture_mode != "none" else None
        if compacted:
            mapped.extra.append(self._row(span_hex, S.LOOP_COMPACTION, start_ns, start_ns, compacted))

    def _raw_penalties(self, mapped: Mapped, attrs: dict[str, object], span_hex: str, start_ns: int) -> Mapped:
        """LiteLLM writes the request's penalties only in its raw payload span (``llm.<provider>.*``)."""
        if self._raw_payload:
            penalties = raw_penalty_values(attrs)
            if penalties:
                mapped.extra.append(self._row(span_hex, S.GEN_PENALTIES, start_ns, start_ns, penalties))
        return mapped

    @staticmethod
    def _common(raw: dict[str, object], a: dict[str, object], start_ns: int, end_ns: int, events: object) -> None:
        """What every shape may carry under any of several names: finish reasons, TTFT, cached tokens, the
        endpoint's host."""
        # each group of spellings is looked up only when the span has one of them (one set test a group:
        # an engine's pass span spells few of them)
        if N.SERVER_ADDRESS not in raw and not _URL_SET.isdisjoint(raw):
            _put(a, N.SERVER_ADDRESS, _host(raw))
        if N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS not in raw and not _CACHED_SET.isdisjoint(raw):
            _put(a, N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, _cached(raw))
        if N.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS not in raw and not _CACHE_WRITE_SET.isdisjoint(raw):
            _put(a, N.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, _cached(raw, _CACHE_WRITE_KEYS, _REPR_CACHE_WRITE))
        spelled = not _FINISH_SET.isdisjoint(raw)
        for key in ((*_FINISH_KEYS, "output.value", "gen_ai.output.messages", "events") if spelled else
                    ("events",) if events else ()):
            # output.value late: OpenInference's Responses-API spans carry the reason only in the response body
            if key == "output.value":
                reasons = body_reasons(raw.get(key))
            elif key == "gen_ai.output.messages":
                reasons = message_reasons(raw.get(key))
            elif key == "events":
                reasons = event_reasons(events)
            else:
                reasons = reason_list(raw.get(key))
            if reasons is not None:
                original = raw.get(N.GEN_AI_RESPONSE_FINISH_REASONS)
                if original is not None and not isinstance(original, list):
                    a[N.FINISH_REASONS_RAW] = original  # e.g. LiteLLM's '["length"]', as sent
                a[N.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
                a[N.FINISH_REASON] = normalize_finish_reason(reasons)
                break
        Mapper._ttft(raw, a, start_ns, end_ns, events)
        Mapper._usage(raw, a)

    @staticmethod
    def _ttft(raw: dict[str, object], a: dict[str, object], start_ns: int, end_ns: int, events: object) -> None:
        """Time to first token from the one table of spellings (otlp_names.TTFT_SPELLINGS), else from a
        first-token event; TPOT from it where the output length is known."""
        if N.TTFT_MS in a:
            return
        found = ttft_ms(raw, start_ns, end_ns)
        if found is None:
            first = _first_token_ns(events)
            if first is not None and start_ns <= first <= max(end_ns, start_ns):
                found = (first - start_ns) / 1e6, "event/first_token"
        if found is None:
            return
        a[N.TTFT_MS], a[N.TTFT_SOURCE] = found
        out = _int(a.get(N.GEN_AI_USAGE_OUTPUT_TOKENS))
        if N.TPOT_MS not in a and out is not None and out > 1 and end_ns > start_ns:
            tpot = ((end_ns - start_ns) / 1e6 - found[0]) / (out - 1)
            if tpot >= 0:
                a[N.TPOT_MS] = tpot

    @staticmethod
    def _usage(raw: dict[str, object], a: dict[str, object]) -> None:
        """Which cache convention the usage block follows (otlp_names.USAGE_SHAPES): a usage object's own
        shape, or what the producer declared; flat gen_ai.usage.* numbers follow OTel GenAI (included). The
        numbers stay as the source counted them; the requests view adds cached tokens back by it."""
        block = usage_block(raw) if not _USAGE_SET.isdisjoint(raw) else None
        if block is not None:
            a[N.USAGE_CACHE_CONVENTION] = block.convention
            _put(a, N.GEN_AI_USAGE_INPUT_TOKENS, block.input_tokens)
            _put(a, N.GEN_AI_USAGE_OUTPUT_TOKENS, block.output_tokens)
            _put(a, N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, block.cache_read)
            _put(a, N.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, block.cache_write)
        elif N.GEN_AI_USAGE_INPUT_TOKENS in a:
            a[N.USAGE_CACHE_CONVENTION] = flat_convention(raw)
        if a.get(N.USAGE_CACHE_CONVENTION) in (EXCLUDED, EXCLUDED_BOTH):
            a.pop(N.METERS_USAGE_CONSISTENT, None)  # (a mapping never checked the sum against the total)

    # -- content -----------------------------------------------------------------------------------
    def _protect(self, attrs: dict[str, object]) -> dict[str, object]:
        """A copy whose prompt/output text follows the capture mode; adds prompt/output hashes."""
        if _NEVER_CONTENT.issuperset(attrs):  # no key that can hold text: one set test, not one a key
            self._content = False
            out = dict(attrs)
            out[N.CONTENT_CAPTURE] = self.capture_mode
            return out
        if len(_NEVER_CONTENT) < _NEVER_CONTENT_CAP:
            _NEVER_CONTENT.update(k for k in attrs if _never_content(k))
        out = {}
        texts: dict[str, str] = {}
        raw = self._raw_payload
        self._content = False
        for key, value in attrs.items():
            if not is_content(key, value, raw):
                out[key] = value
                continue
            self._content = True
            if isinstance(value, str) and value in _REDACTED:
                # the app's own switch hid the text: the marker is kept as sent, but hashed it would make
                # every prompt and every answer "the same text" to the cache and output analyses
                out[key] = value
                continue
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
            texts[key] = text
            if self.capture_mode == "full":
                out[key] = capture.scrub(text)
            elif self.capture_mode == "hashes":
                out[key + ".hash"] = capture.hash_text(text)
        # read only from text that was captured (not a redaction marker)
        answer = answer_text({k: attrs[k] for k in texts}) if texts and self.capture_mode != "none" else None
        if answer is not None:  # the answer, not the response around it (otlp_segments.answer_text)
            out[N.OUTPUT_HASH] = capture.hash_text(answer)
        for keys, target in ((_INPUT_KEYS, N.PROMPT_HASH), (_OUTPUT_KEYS, N.OUTPUT_HASH)):
            if self.capture_mode == "none":
                break
            for k in keys:
                if k in texts:
                    _put(out, target, capture.hash_text(texts[k]))
                    break
        out[N.CONTENT_CAPTURE] = self.capture_mode
        return out

    # -- shapes --------------------------------------------------------------------------------------
    def _genai(self, name: str, kind: str, attrs: dict[str, object], start_ns: int, end_ns: int) -> Mapped:
        a = self._protect(attrs)
        legacy = "gen_ai.system" in attrs or "gen_ai.usage.prompt_tokens" in attrs
        op = attrs.get(N.GEN_AI_OPERATION_NAME)
        if not isinstance(op, str):
            req_type = attrs.get("llm.request.type")
            op = _OPENLLMETRY_OPS.get(req_type) if isinstance(req_type, str) else None
            if op == "text_completion" and (name == "litellm_request" or "litellm.call_id" in attrs):
                # LiteLLM's "completion" is litellm.completion(), a chat call; it names the operation itself
                # only while message logging is on, so with turn_off_message_logging this is all there is
                op = "chat"
            if op is None:
                head = name.split(" ", 1)[0]
                op = head if head in GENAI_OPS else ("chat" if N.GEN_AI_REQUEST_MODEL in attrs else None)
        if op is not None:
            a[N.GEN_AI_OPERATION_NAME] = op
        _put(a, N.GEN_AI_PROVIDER_NAME, attrs.get("gen_ai.system"))
        _put(a, N.GEN_AI_USAGE_INPUT_TOKENS, _int(attrs.get("gen_ai.usage.prompt_tokens",
                                                            attrs.get("llm.usage.prompt_tokens"))))
        _put(a, N.GEN_AI_USAGE_OUTPUT_TOKENS, _int(attrs.get("gen_ai.usage.completion_tokens",
                                                             attrs.get("llm.usage.completion_tokens"))))
        _put(a, N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, _int(attrs.get("gen_ai.usage.cache_read_input_tokens",
                                                                       attrs.get("llm.usage.cache_read_input_tokens"))))
        _put(a, N.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, _int(attrs.get("gen_ai.usage.reasoning_tokens")))  # OpenLLMetry
        if _MLFLOW_KIND in attrs:
            a[N.GEN_AI_OPERATION_NAME] = op = "chat"  # its usage block: otlp_names (convention excluded)
            _put(a, N.GEN_AI_REQUEST_MODEL, attrs.get("mlflow.llm.model") or attrs.get("model"))
            legacy = False
        a[N.SIDE] = "server" if kind == "server" else "client"
        a[N.MAPPED_FROM] = "mlflow" if _MLFLOW_KIND in attrs else "genai-legacy" if legacy else "genai"
        return self._finish(op, a)

    def _traceloop(self, attrs: dict[str, object]) -> Mapped:
        """OpenLLMetry's own spans around the model calls: @tool and @agent functions."""
        a = self._protect(attrs)
        op = _TRACELOOP_OPS[str(attrs["traceloop.span.kind"])]
        a[N.GEN_AI_OPERATION_NAME] = op
        if op == "execute_tool":
            _put(a, N.GEN_AI_TOOL_NAME, attrs.get("traceloop.entity.name"))
        else:
            _put(a, N.GEN_AI_AGENT_NAME, attrs.get("traceloop.entity.name"))
        a[N.SIDE] = "client"
        a[N.MAPPED_FROM] = "openllmetry"
        return self._finish(op, a)

    def _openinference(self, attrs: dict[str, object]) -> Mapped:
        a = self._protect(attrs)
        oi_kind = str(attrs.get("openinference.span.kind", "")).upper()
        op = _OI_KIND_OPS.get(oi_kind)
        if op == "chat" and "llm.prompts" in attrs and "llm.input_messages.0.message.role" not in attrs:
            op = "text_completion"
        if op is not None:
            _put(a, N.GEN_AI_OPERATION_NAME, op)
        _put(a, N.GEN_AI_REQUEST_MODEL, attrs.get("llm.model_name") or attrs.get("embedding.model_name"))
        _put(a, N.GEN_AI_PROVIDER_NAME, attrs.get("llm.provider") or attrs.get("llm.system"))
        _put(a, N.GEN_AI_USAGE_INPUT_TOKENS, _int(attrs.get("llm.token_count.prompt")))
        _put(a, N.GEN_AI_USAGE_OUTPUT_TOKENS, _int(attrs.get("llm.token_count.completion")))
        _put(a, N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
             _int(attrs.get("llm.token_count.prompt_details.cache_read")))
        _put(a, N.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
             _int(attrs.get("llm.token_count.completion_details.reasoning")))
        _put(a, N.GEN_AI_TOOL_NAME, attrs.get("tool.name"))
        _put(a, N.GEN_AI_CONVERSATION_ID, attrs.get(N.SESSION_ID))
        params = attrs.get("llm.invocation_parameters")
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError:
                params = None
        if isinstance(params, dict):
            _put(a, N.GEN_AI_REQUEST_TEMPERATURE, _num(params.get("temperature")))
            _put(a, N.GEN_AI_REQUEST_TOP_P, _num(params.get("top_p")))
            _put(a, N.GEN_AI_REQUEST_SEED, _int(params.get("seed")))
            _put(a, N.GEN_AI_REQUEST_MAX_TOKENS, _int(next((params[k] for k in ("max_tokens", "max_completion_tokens",
                                                                           "max_output_tokens") if k in params), None)))
        a[N.SIDE] = "client"
        a[N.MAPPED_FROM] = "openinference"
        return self._finish(op, a)

    def _vllm(self, name: str, attrs: dict[str, object], span_hex: str, start_ns: int, end_ns: int) -> Mapped:
        """vLLM's (V0, V1), SGLang's or ARMS's request span: the engine's pass, and the stage rows its
        gen_ai.latency.* numbers imply (otlp_engines.request_latencies, in the unit they are written in)."""
        a = self._protect(attrs)
        op = attrs.get(N.GEN_AI_OPERATION_NAME)
        op = op if isinstance(op, str) else "text_completion"  # the engine span does not say chat or not
        a[N.GEN_AI_OPERATION_NAME] = op
        # SGLang's request span is `` Req <rid[:8]>`` with ``rid`` (srt/tracing/trace.py trace_req_start)
        sglang = "rid" in attrs or "sglang" in name.lower() or "\0sglang." in "\0" + "\0".join(attrs)
        _put(a, N.GEN_AI_REQUEST_MODEL, attrs.get(N.GEN_AI_RESPONSE_MODEL))
        _put(a, N.GEN_AI_PROVIDER_NAME, "sglang" if sglang else "vllm")
        _put(a, N.GEN_AI_USAGE_INPUT_TOKENS, _int(attrs.get("gen_ai.usage.prompt_tokens",
                                                            attrs.get(N.GEN_AI_USAGE_INPUT_TOKENS))))
        _put(a, N.GEN_AI_USAGE_OUTPUT_TOKENS, _int(attrs.get("gen_ai.usage.completion_tokens",
                                                             attrs.get(N.GEN_AI_USAGE_OUTPUT_TOKENS))))
        a[N.SIDE] = "server"
        mapped = self._finish(op, a)
        request_latencies(attrs, span_hex, start_ns, end_ns, mapped, self.ledger, "sglang" if sglang else "vllm")
        return mapped

    # -- helpers -------------------------------------------------------------------------------------
    @staticmethod
    def _finish(op: object, a: dict[str, object]) -> Mapped:
        if op == "execute_tool":
            return Mapped("execute_tool", _TOOL_STAGE, get_stage(_TOOL_STAGE).phase, a)
        return Mapped(op if isinstance(op, str) else None, None, None, a)

    _row = staticmethod(stage_row)
