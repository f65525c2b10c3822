"""Token usage as providers report it, and one normalised form the store can compare across providers.

OpenAI counts cached prompt tokens *inside* ``prompt_tokens``; Anthropic reports ``input_tokens`` for
the uncached remainder and adds ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` beside
it. Normalised here: ``input_tokens`` is every prompt token, ``cache_read_tokens`` the part served from
cache, ``uncached_tokens`` the rest. The raw numbers are kept too, and impossible totals are flagged
rather than silently fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmtrace.tracer.registry import names as N

# How a usage block counts cached prompt tokens (``llmtrace.usage.cache_convention``): inside ``input_tokens``
# (OTel GenAI, OpenAI), reads beside (MLflow), reads and writes beside (Anthropic's API, Bedrock)
INCLUDED, EXCLUDED, EXCLUDED_BOTH = "included", "excluded", "excluded_both"
CONVENTIONS = frozenset({INCLUDED, EXCLUDED, EXCLUDED_BOTH})


@dataclass(frozen=True, slots=True)
class Usage:
    """Normalised usage of one pass. ``None`` means the provider did not say."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None  # every cache write, 1-hour ones included
    reasoning_tokens: int | None = None
    consistent: bool = True
    problems: tuple[str, ...] = ()
    raw: Mapping[str, int] = field(default_factory=dict)
    cache_write_1h_tokens: int | None = None  # the part of the writes kept for an hour (Anthropic), priced higher

    @property
    def uncached_tokens(self) -> int | None:
        if self.input_tokens is None:
            return None
        return self.input_tokens - (self.cache_read_tokens or 0)

    @property
    def hit_rate(self) -> float | None:
        if not self.input_tokens or self.cache_read_tokens is None or not self.consistent:
            return None
        return self.cache_read_tokens / self.input_tokens

    def attributes(self) -> dict[str, object]:
        """Pass-span attributes: semconv names for the normalised values, ``llmtrace.usage.raw.*`` for raw."""
        attrs: dict[str, object] = {
            N.GEN_AI_USAGE_INPUT_TOKENS: self.input_tokens,
            N.GEN_AI_USAGE_OUTPUT_TOKENS: self.output_tokens,
            N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: self.cache_read_tokens,
            N.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: self.cache_write_tokens,
            N.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: self.reasoning_tokens,
            N.METERS_USAGE_CONSISTENT: self.consistent,
        }
        if self.problems:
            attrs[N.USAGE_PROBLEMS] = list(self.problems)
        for k, v in self.raw.items():
            attrs[N.USAGE_RAW_PREFIX + k] = v
        return {k: v for k, v in attrs.items() if v is not None}


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _flatten(raw: Mapping[str, object], prefix: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in raw.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            iv = _int(v)
            if iv is not None:
                out[f"{prefix}{k}"] = iv
    return out


def _check(u: dict[str, int | None], total: int | None) -> tuple[str, ...]:
    problems: list[str] = []
    for name, v in u.items():
        if v is not None and v < 0:
            problems.append(f"negative {name}")
    inp, cached, written = u["input_tokens"], u["cache_read_tokens"], u["cache_write_tokens"]
    if inp is not None and cached is not None and cached > inp:
        problems.append("cached tokens exceed input tokens")
    if inp is not None and (cached or 0) + (written or 0) > inp and not (cached is not None and cached > inp):
        problems.append("cache reads plus writes exceed input tokens")
    out, reasoning = u["output_tokens"], u["reasoning_tokens"]
    if out is not None and reasoning is not None and reasoning > out:
        problems.append("reasoning tokens exceed output tokens")
    if total is not None and inp is not None and out is not None and total != inp + out:
        problems.append("total tokens differ from input plus output")
    return tuple(problems)


def from_convention(convention: str | None, input_tokens: int | None, output_tokens: int | None,
                    cache_read: int | None, cache_write: int | None) -> Usage:
    """A usage block as a span spells it, read with the cache convention it follows (the collector records it:
    tracer/collect/otlp_names.py), in the normalised form: cache reads, and for ``excluded_both`` the writes,
    added back into ``input_tokens`` exactly as the ``requests`` view adds them (tracer/storage/views.py
    PROMPT_TOKENS_SQL), so a foreign pass is priced as the middleware prices the same call."""
    prompt = input_tokens
    if input_tokens is not None and convention in (EXCLUDED, EXCLUDED_BOTH):
        prompt = input_tokens + (cache_read or 0) + ((cache_write or 0) if convention == EXCLUDED_BOTH else 0)
    vals: dict[str, int | None] = {
        "input_tokens": prompt,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": None,
    }
    problems = _check(vals, None)
    return Usage(**vals, consistent=not problems, problems=problems, raw={})


def _cached_inside_input(raw: Mapping[str, object], input_key: str, output_key: str) -> Usage:
    """OpenAI-style usage, where cached tokens are counted inside the input total.

    Chat completions and the Responses API differ only in the names: ``prompt``/``completion`` versus
    ``input``/``output``, each with a ``*_tokens_details`` object beside it.
    """
    details = raw.get(f"{input_key}_details")
    out_details = raw.get(f"{output_key}_details")
    vals: dict[str, int | None] = {
        "input_tokens": _int(raw.get(input_key)),
        "output_tokens": _int(raw.get(output_key)),
        "cache_read_tokens": _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None,
        "cache_write_tokens": None,
        "reasoning_tokens": (
            _int(out_details.get("reasoning_tokens")) if isinstance(out_details, Mapping) else None
        ),
    }
    problems = _check(vals, _int(raw.get("total_tokens")))
    return Usage(**vals, consistent=not problems, problems=problems, raw=_flatten(raw))


def from_openai(raw: Mapping[str, object]) -> Usage:
    """OpenAI chat-completions usage: cached tokens are part of ``prompt_tokens``."""
    return _cached_inside_input(raw, "prompt_tokens", "completion_tokens")


def from_anthropic(raw: Mapping[str, object]) -> Usage:
    """Anthropic messages usage: cache reads and writes are reported *beside* ``input_tokens``."""
    flat = _flatten(raw)
    uncached = _int(raw.get("input_tokens"))
    read = _int(raw.get("cache_read_input_tokens"))
    write = _int(raw.get("cache_creation_input_tokens"))
    problems: list[str] = []
    for name, v in (
        ("input_tokens", uncached),
        ("cache_read_input_tokens", read),
        ("cache_creation_input_tokens", write),
    ):
        if v is not None and v < 0:
            problems.append(f"negative {name}")
    total_in = None if uncached is None else uncached + max(read or 0, 0) + max(write or 0, 0)
    vals: dict[str, int | None] = {
        "input_tokens": total_in,
        "output_tokens": _int(raw.get("output_tokens")),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": None,
    }
    problems.extend(p for p in _check(vals, None) if p not in problems)
    w1h = flat.get("cache_creation.ephemeral_1h_input_tokens")
    return Usage(
        **vals, consistent=not problems, problems=tuple(problems), raw=flat,
        cache_write_1h_tokens=w1h if w1h is not None and w1h >= 0 else None,
    )


def from_openai_responses(raw: Mapping[str, object]) -> Usage:
    """OpenAI Responses API usage: like chat completions (cached inside input), other field names."""
    return _cached_inside_input(raw, "input_tokens", "output_tokens")


NORMALISERS = {"openai": from_openai, "anthropic": from_anthropic, "openai_responses": from_openai_responses}


def normalise(style: str, raw: Mapping[str, object]) -> Usage:
    """Usage in the normalised form, read according to the API that reported it."""
    return NORMALISERS[style](raw)


def merge_anthropic(
    start: Mapping[str, object] | None, delta: Mapping[str, object] | None
) -> dict[str, object]:
    """Streamed Anthropic usage arrives twice: input counts in ``message_start``, final output counts
    (and sometimes updated input counts) in ``message_delta``. Later non-null values win."""
    merged: dict[str, object] = dict(start or {})
    for k, v in (delta or {}).items():
        if v is not None:
            merged[k] = v
    return merged
