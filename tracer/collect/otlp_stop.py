"""How a foreign chat span's answer ended, as ``gen.stop`` (the stage the bundled server and the middleware
write, tracer/reading/stop_context.py), so ``analyzers/symptoms/early_end.py`` reads an OpenTelemetry GenAI,
OpenInference, OpenLLMetry or LiteLLM span as it reads our own.

The end kind comes from the span's finish reason (already normalised by the mapping), its error status, and
the request's stop strings where the instrumentation recorded them (OTel GenAI
``gen_ai.request.stop_sequences``, OpenInference's ``llm.invocation_parameters``, OpenLLMetry's
``llm.chat.stop_sequences``, LiteLLM's raw ``llm.<provider>.stop``). The classes of the answer's end (what
preceded the cut, what it was inside) are read from the captured answer text here, at ingest: only classes,
lengths and offsets are stored, so a hashes-mode collector keeps no word of the answer.

Where the instrumentation did not record the request's stop strings, a plain "stop" is the end of the turn,
unless the answer's end shows something else cut it: a JSON value or code block left open, or a period-taking
abbreviation with no period. Then it is ``stop_unknown`` (a stop, not said which), as the middleware writes a
"stop" it cannot tell from a stop string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from llmtrace.tracer.collect.otlp_segments import _output
from llmtrace.tracer.reading import stop_context
from llmtrace.tracer.registry import names as N

# foreign keys (OTel GenAI semconv, OpenLLMetry): not llmtrace names, so spelled here
_STOP_KEYS = ("gen_ai.request.stop_sequences", "llm.chat.stop_sequences", "gen_ai.request.stop")
_RAW_STOP = re.compile(r"^llm\.[\w-]+\.(stop|stop_sequences)$")
# raw finish reasons that name a stop sequence as the end (Anthropic's, as LiteLLM or an Anthropic
# instrumentation passes it on)
_NAMES_STOP = frozenset({"stop_sequence"})
_REDACTED = frozenset({"__REDACTED__", "redacted-by-litellm", ""})


def _as_list(value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value[:1] != "[":
            return [value]
        try:
            value = json.loads(text := value)
        except ValueError:
            return [text]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    return None


def stop_strings(attrs: Mapping[str, object]) -> list[str] | None:
    """The request's stop strings, or None when the span does not say (not: "none were set")."""
    for key in _STOP_KEYS:
        got = _as_list(attrs.get(key))
        if got is not None:
            return got
    params = attrs.get("llm.invocation_parameters")
    if isinstance(params, str) and params[:1] == "{":
        try:
            params = json.loads(params)
        except ValueError:
            params = None
    if isinstance(params, Mapping):
        got = _as_list(params.get("stop") if "stop" in params else params.get("stop_sequences"))
        return got if got is not None else []  # the parameters were recorded and named none
    for key, value in attrs.items():
        if _RAW_STOP.match(key):
            return _as_list(value)
    return None


def _cut_by_something(text: str | None) -> bool:
    """An answer whose end shows it did not end on its own: inside a JSON value or code block, or right after
    an abbreviation that takes a period."""
    if not text:
        return False
    return stop_context.inside(text) != "none" or stop_context.preceded_by(text) == "abbreviation"


def _raw_reasons(attrs: Mapping[str, object], mapped: Mapping[str, object]) -> list[str]:
    raw = mapped.get(N.GEN_AI_RESPONSE_FINISH_REASONS)
    return [str(r) for r in raw] if isinstance(raw, (list, tuple)) else []


def stop_row(attrs: Mapping[str, object], mapped: Mapping[str, object], status_message: str | None,
             capture_mode: str) -> dict[str, object] | None:
    """The ``gen.stop`` values of one foreign chat span (``mapped``: the attributes the mapping made of it, with
    the canonical finish reason), or None when the span says nothing of how it ended."""
    canonical = mapped.get(N.FINISH_REASON)
    failed = bool(attrs.get("error.type") or status_message)
    if canonical is None and not failed:
        return None
    text, tool = _output(attrs) if capture_mode != "none" else (None, False)
    if isinstance(text, str) and text in _REDACTED:
        text = None
    stops = stop_strings(attrs)
    named = any(r in _NAMES_STOP for r in _raw_reasons(attrs, mapped))
    if failed and canonical in (None, "error"):
        kind = "error"
    elif stops is None and canonical == "stop" and not named:
        kind = "stop_unknown" if _cut_by_something(text) and not tool else "end_turn"
    else:
        kind = stop_context.end_kind(str(canonical), matched_stop_string=named, stop_strings_set=bool(stops),
                                     said_which=False)
    distinct = list(dict.fromkeys(stops or ()))
    stop = distinct[0] if kind in ("stop_unknown", "stop_string") and len(distinct) == 1 else None
    answer = text if text is not None and not tool else None
    values = stop_context.stop_values(answer, kind, stop, len(distinct))
    if capture_mode != "full":
        values[N.STOP_MATCHED] = None  # the stop string's text only under full capture
    if capture_mode == "none":
        values[N.STOP_STRING_HASH] = None
    return {k: v for k, v in values.items() if v is not None}
