"""Finish reasons, one vocabulary: every provider's and instrumentation's spelling onto six words.

    stop            the model ended its turn (end token, a stop sequence, Anthropic end_turn, Gemini STOP)
    length          a token cap cut the answer (OpenAI length, Anthropic max_tokens, Responses
                    incomplete/max_output_tokens, Gemini MAX_TOKENS, the context window)
    tool_calls      the turn ended in a tool call (OpenAI tool_calls/function_call, Anthropic tool_use)
    content_filter  a safety system stopped or refused it (Anthropic refusal, Gemini SAFETY, ...)
    error           the provider failed the generation (a malformed tool call, an error status)
    other           a reason that is none of the above (Anthropic pause_turn, an unknown word)

Values arrive in many shapes: plain strings in any case, enum reprs (``FinishReason.STOP``), proto
names (``FINISH_REASON_STOP``), lists (OTel ``gen_ai.response.finish_reasons``) and list-like strings
(``'["length"]'`` as LiteLLM and OpenInference store them). ``normalize_finish_reason`` takes any of
them; analyzers, the explorer and the collector's mapping call it rather than keeping a table of their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

CANONICAL: Final = ("stop", "length", "tool_calls", "content_filter", "error", "other")

_STOP = ("stop", "end_turn", "stop_sequence", "eos", "eos_token", "end", "complete", "completed", "finished",
         "stop_token", "endoftext")
_LENGTH = ("length", "max_tokens", "max_output_tokens", "max_completion_tokens", "model_length",
           "model_context_window_exceeded", "context_length_exceeded", "context_window_exceeded", "token_limit",
           "max_length", "truncated")
_TOOL = ("tool_calls", "tool_call", "tool_use", "function_call", "function_calls", "tools")
_FILTER = ("content_filter", "content_filtered", "refusal", "safety", "recitation", "blocklist",
           "prohibited_content", "spii", "image_safety", "guardrail_intervened", "error_toxic", "moderation")
_ERROR = ("error", "failed", "malformed_function_call", "unexpected_tool_call", "error_limit")
_OTHER = ("other", "pause_turn", "abort", "aborted", "cancelled", "canceled", "language", "unspecified",
          "finish_reason_unspecified", "stop_reason_unspecified", "incomplete", "max_messages", "steered",
          "unknown", "none")

_TABLE: Final[dict[str, str]] = {
    word: canonical
    for canonical, words in (("stop", _STOP), ("length", _LENGTH), ("tool_calls", _TOOL),
                             ("content_filter", _FILTER), ("error", _ERROR), ("other", _OTHER))
    for word in words
}
# Responses API: status "incomplete" says little; incomplete_details.reason says why.
_INCOMPLETE_DETAIL: Final = {"max_output_tokens": "length", "content_filter": "content_filter"}


def normalize_finish_reason(value: Any, detail: Any = None) -> str | None:
    """The canonical finish reason of ``value`` (one of ``CANONICAL``), or None when there is none.

    ``detail`` is the Responses API's ``incomplete_details.reason`` (or any qualifier a status needs):
    ``normalize_finish_reason("incomplete", "max_output_tokens") == "length"``. A list gives its first
    reason. Never raises: a value of an unexpected type is ``"other"``.
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            got = normalize_finish_reason(item, detail)
            if got is not None:
                return got
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        name = getattr(value, "name", None)  # an Enum member (google-genai's FinishReason.STOP)
        if isinstance(name, str):
            return normalize_finish_reason(name, detail)
        return "other"
    text = value.strip()
    if not text:
        return None
    if text[0] in "[(":
        inner = _list_like(text)
        return normalize_finish_reason(inner, detail) if inner is not None else "other"
    word = _word(text)
    if not word:
        return None
    if word in ("incomplete", "status_incomplete") and detail is not None:
        got = _INCOMPLETE_DETAIL.get(_word(str(detail)))
        if got is not None:
            return got
    return _TABLE.get(word, "other")


def normalize_finish_reasons(values: Iterable[Any] | Any) -> list[str]:
    """Each reason of a list (or list-like string) normalised, in order, empty ones dropped."""
    if isinstance(values, str):
        inner = _list_like(values.strip()) if values.strip()[:1] in ("[", "(") else [values]
        values = inner if inner is not None else [values]
    elif not isinstance(values, (list, tuple)):
        values = [values]
    out = []
    for v in values:
        got = normalize_finish_reason(v)
        if got is not None:
            out.append(got)
    return out


def is_truncated(value: Any, detail: Any = None) -> bool:
    """Whether the generation was cut by a token cap (any provider's spelling)."""
    return normalize_finish_reason(value, detail) == "length"


def _word(text: str) -> str:
    word = text.strip().strip("'\"").strip().lower().replace("-", "_").replace(" ", "_")
    if "." in word:  # FinishReason.STOP, StopReason.END_TURN
        word = word.rsplit(".", 1)[1]
    for prefix in ("finish_reason_", "stop_reason_"):
        if word.startswith(prefix) and word != "finish_reason_unspecified":
            word = word[len(prefix):]
    return word


def _list_like(text: str) -> list[Any] | None:
    """``'["length"]'``, ``"['length']"`` or ``"(stop,)"`` as a list; None when it is not list-like."""
    try:
        got = json.loads(text)
    except ValueError:
        body = text.strip("[]() \t")
        got = [p for p in (s.strip().strip("'\"") for s in body.split(",")) if p]
    if isinstance(got, list):
        return got
    return None
