"""The names the field spells one fact with, normalised once: time to first token, and a usage block's
cache convention.

Time to first token comes under a dozen names and in three units. Every spelling the collector reads is one
row of :data:`TTFT_SPELLINGS` (its key and its unit); :func:`ttft_ms` walks the table once and the pass span
gets one value, ``llmtrace.ttft_ms``, with the spelling and the unit it came from (``llmtrace.ttft.source``).
A unit of ``auto`` is told from the span itself (:func:`seconds_scale`): vLLM's V0 engine and SGLang write
``gen_ai.latency.*`` in seconds, vLLM V1 in nanoseconds, under the same names.

Cached prompt tokens are counted three ways (:data:`USAGE_SHAPES`): OpenTelemetry GenAI counts them *inside*
``input_tokens`` (``included``); MLflow's ``input_tokens`` are the uncached ones with cache reads beside
(``excluded``); Anthropic's API and Bedrock's Converse report reads and writes both beside the input
(``excluded_both``). The mapper records which one a usage block follows (``llmtrace.usage.cache_convention``)
and the ``requests`` view adds the cached tokens back into ``prompt_tokens`` by it
(tracer/storage/views.py), so the hit rate and the cost agree whichever tool produced the span.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# the conventions' one spelling, which the price of a foreign pass reads too (otlp_cost.py)
from llmtrace.tracer.record.usage import CONVENTIONS, EXCLUDED, EXCLUDED_BOTH, INCLUDED
from llmtrace.tracer.registry import names as N

Unit = Literal["s", "ms", "us", "ns", "auto", "at"]  # "at": a point in time, not a duration (Langfuse)

# Every spelling of time to first token read from a span's attributes, first match wins (the order is
# the order of trust: a server's own measure before a client's, our own name first).
TTFT_SPELLINGS: tuple[tuple[str, Unit], ...] = (
    ("gen_ai.response.time_to_first_chunk", "s"),  # OTel GenAI semconv v1.41 (span attribute)
    ("gen_ai.server.time_to_first_token", "s"),  # semconv's server metric name, sent as an attribute
    ("gen_ai.client.operation.time_to_first_chunk", "s"),  # semconv's client metric name, as an attribute
    ("gen_ai.response.time_to_first_token", "s"),  # older semconv drafts, Traceloop
    ("gen_ai.latency.time_to_first_token", "auto"),  # vLLM (V0 s, V1 ns), SGLang (s)
    ("gen_ai.client.time_to_first_token", "s"),
    ("llm.time_to_first_token", "s"),
    ("ttft_ms", "ms"),  # Dynamo's engine.generate (ai-dynamo/dynamo PR 9543)
    ("llm_d.pd_proxy.true_ttft_ms", "ms"),  # llm-d's P/D sidecar: TTFT across the prefill and decode hops
    ("gen_ai.ttft", "auto"),  # seen in s and in ms
    ("langfuse.observation.completion_start_time", "at"),  # Langfuse's completionStartTime, over OTel
    ("completionStartTime", "at"),  # Langfuse's own field name, copied onto a span
)
TTFT_KEYS = frozenset(k for k, _ in TTFT_SPELLINGS)
_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_AUTO = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def number(value: object) -> float | None:
    """A finite number (strings of one too), or None."""
    kind = type(value)
    if kind is float:  # the common cases first, without a try block (this runs a dozen times an engine span)
        return value if value - value == 0.0 else None  # type: ignore[operator,return-value]
    if kind is int and -(2**63) <= value < 2**64:  # type: ignore[operator]
        return float(value)  # type: ignore[arg-type]
    if value is None or kind is bool:
        return None
    try:
        if isinstance(value, (int, float)):
            f = float(value)
        elif isinstance(value, str) and len(value) <= 64:
            f = float(value)
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def seconds_scale(values: list[float], span_s: float) -> tuple[float, str]:
    """The unit a group of durations is written in, as (seconds per unit, name). The largest unit under
    which the longest value still fits inside the span is the one (a queue time of 3e8 in a 1.2 s span is
    nanoseconds; 0.3 is seconds). A span with no length to go by: values past a million are nanoseconds
    (no request waits 11 days), else seconds, the unit of vLLM V0 and SGLang."""
    top = max(values, default=0.0)
    if top <= 0:
        return 1.0, "s"
    if span_s > 0:
        for scale, name in _AUTO:
            if top * scale <= span_s * 1.01 + 1e-3:
                return scale, name
        return 1e-9, "ns"
    return (1e-9, "ns") if top > 1e6 else (1.0, "s")


def _instant_ns(value: object) -> int | None:
    """A point in time as epoch nanoseconds: an ISO 8601 string, or epoch seconds/ms/us/ns by magnitude."""
    if isinstance(value, str) and not value.replace(".", "", 1).isdigit():
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
        return int(t.timestamp() * 1e9)
    n = number(value)
    if n is None or n <= 0:
        return None
    for limit, per in ((1e11, 1e9), (1e14, 1e6), (1e17, 1e3)):
        if n < limit:
            return int(n * per)
    return int(n)


def ttft_ms(raw: Mapping[str, object], start_ns: int, end_ns: int) -> tuple[float, str] | None:
    """Time to first token in ms from the first spelling in the table the span carries, with the spelling and
    unit it came from (``key/unit``: no ``token:`` for the credential check to stop at); None when none is there or its value cannot be a TTFT of this span."""
    if TTFT_KEYS.isdisjoint(raw):  # most spans spell none: one set operation, not a dozen lookups
        return None
    span_s = (end_ns - start_ns) / 1e9 if end_ns > start_ns else 0.0
    for key, unit in TTFT_SPELLINGS:
        value = raw.get(key)
        if value is None:
            continue
        if unit == "at":
            at = _instant_ns(value)
            if at is None or at < start_ns or (end_ns > start_ns and at > end_ns):
                continue
            return (at - start_ns) / 1e6, f"{key}/at"
        n = number(value)
        if n is None or n < 0:
            continue
        if unit == "auto":
            scale, told = seconds_scale([n, number(raw.get("gen_ai.latency.e2e")) or 0.0], span_s)
        else:
            scale, told = _SCALE[unit], unit
        s = n * scale
        if s > 1e7:  # past ~115 days: not a duration this span can hold
            continue
        return s * 1000.0, f"{key}/{told}"
    return None


# ── usage blocks and their cache convention ─────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class UsageShape:
    """One way a usage object spells its fields, and the convention its input count follows."""

    source: str
    convention: str
    input: str
    output: str
    read: str
    write: str | None
    marker: str  # a field only this shape has (how the object is told apart)


USAGE_SHAPES: tuple[UsageShape, ...] = (
    # Bedrock Converse's usage (camelCase): inputTokens excludes cache reads and writes
    UsageShape("bedrock", EXCLUDED_BOTH, "inputTokens", "outputTokens", "cacheReadInputTokens",
               "cacheWriteInputTokens", "inputTokens"),
    # Anthropic Messages' usage: input_tokens excludes cache reads and writes
    UsageShape("anthropic", EXCLUDED_BOTH, "input_tokens", "output_tokens", "cache_read_input_tokens",
               "cache_creation_input_tokens", "cache_creation_input_tokens"),
    # OpenAI's usage: cached tokens inside prompt_tokens
    UsageShape("openai", INCLUDED, "prompt_tokens", "completion_tokens", "prompt_tokens_details.cached_tokens",
               None, "prompt_tokens"),
)
# MLflow's span attribute: {"input_tokens", "output_tokens", "total_tokens"}, cache reads beside
# (mlflow/tracing/constant.py TokenUsageKey; MLflow issue 24759 on the cost it overstated when added wrongly)
MLFLOW_USAGE = "mlflow.chat.tokenUsage"
_MLFLOW = UsageShape("mlflow", EXCLUDED, "input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens", "input_tokens")
# Attributes that hold a whole usage object as JSON (a provider's response field copied onto the span)
USAGE_OBJECT_KEYS = (MLFLOW_USAGE, "gen_ai.usage", "llm.usage", "usage", "response.usage")
CONVENTION_KEY = N.USAGE_CACHE_CONVENTION
# Flat attributes whose very name gives the convention away: "write" is Bedrock's word (cacheWriteInputTokens;
# OTel and Anthropic say "creation"), and the Strands Agents SDK copies Bedrock's inputTokens, which leave
# reads and writes out, into gen_ai.usage.input_tokens (strands/telemetry/tracer.py)
FLAT_MARKERS: tuple[tuple[str, str], ...] = (("gen_ai.usage.cache_write_input_tokens", EXCLUDED_BOTH),)


@dataclass(frozen=True, slots=True)
class Usage:
    convention: str
    source: str
    input_tokens: int | None
    output_tokens: int | None
    cache_read: int | None
    cache_write: int | None


def _get(obj: Mapping[str, Any], path: str) -> int | None:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    n = number(cur)
    return int(n) if n is not None and 0 <= n < 2**53 else None


def usage_block(raw: Mapping[str, object]) -> Usage | None:
    """The usage object a span carries as JSON, read with the convention its shape follows; None when the
    span carries none (its flat ``gen_ai.usage.*`` numbers follow OTel GenAI: included)."""
    for key in USAGE_OBJECT_KEYS:
        value = raw.get(key)
        if not isinstance(value, str) or not value.startswith("{") or len(value) > 4096:
            continue
        try:
            obj = json.loads(value)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        shapes = (_MLFLOW,) if key == MLFLOW_USAGE else USAGE_SHAPES
        for shape in shapes:
            if shape.marker in obj:
                return Usage(shape.convention, shape.source, _get(obj, shape.input), _get(obj, shape.output),
                             _get(obj, shape.read), _get(obj, shape.write) if shape.write else None)
    return None


def flat_convention(raw: Mapping[str, object]) -> str:
    """The convention of a span's flat usage numbers: what the producer declared (any of the three names),
    else what a telltale attribute name says, else OTel GenAI's (included)."""
    value = raw.get(CONVENTION_KEY)
    if isinstance(value, str) and value in CONVENTIONS:
        return value
    for key, convention in FLAT_MARKERS:
        if key in raw:
            return convention
    return INCLUDED
