"""Providers' own cache-miss diagnostics: read them when the app asked, ask for them when told to.

Anthropic answers a request carrying ``diagnostics.previous_message_id`` with ``diagnostics.cache_miss_reason``
(``{"type": "tools_changed", "cache_missed_input_tokens": N}``; ``null`` while the comparison is pending).
The OpenAI Responses API answers ``prompt_cache_options.comparison_response_id`` with
``prompt_cache_diagnostics`` (``{"type": "cache_miss", "reason": ..., "cache_missed_tokens": N}``, or
``cache_hit`` / ``comparison_response_not_found`` / ``unavailable``). Both end on ``cache.prefix_match`` as
``llmtrace.cache.miss_reason`` and ``llmtrace.cache.missed_tokens``.

With ``instrument(..., cache_diagnostics=True)`` the middleware adds the request field itself, naming the
previous response of the same conversation (see ``sessions``); a request that already carries one is
left as the app wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmtrace.adapters.middleware.observation import integer
from llmtrace.tracer.registry import names as N


def from_anthropic(diagnostics: object) -> tuple[str, int | None] | None:
    """(reason, missed tokens) from an Anthropic ``diagnostics`` object; None when there is nothing to say."""
    if not isinstance(diagnostics, Mapping):
        return None
    reason = diagnostics.get("cache_miss_reason")
    if not isinstance(reason, Mapping):
        return ("pending", None) if "cache_miss_reason" in diagnostics else None
    kind = reason.get("type")
    return (str(kind), integer(reason.get("cache_missed_input_tokens"))) if kind else None


def from_openai(diagnostics: object) -> tuple[str, int | None] | None:
    """(reason, missed tokens) from the Responses API's ``prompt_cache_diagnostics``."""
    if not isinstance(diagnostics, Mapping) or not diagnostics.get("type"):
        return None
    kind = str(diagnostics["type"])
    if kind == "cache_miss":
        return str(diagnostics.get("reason") or "cache_miss"), integer(diagnostics.get("cache_missed_tokens"))
    return ("none" if kind == "cache_hit" else kind), (0 if kind == "cache_hit" else None)


def with_request(style: str, body: Mapping[str, Any], previous_id: str | None) -> dict[str, Any] | None:
    """The body with the provider's diagnostics field added, or None when nothing is to change."""
    if style == "anthropic":
        if "diagnostics" in body:
            return None
        # null on a conversation's first call opts in, so the next call has something to compare with
        return {**body, "diagnostics": {"previous_message_id": previous_id}}
    if style == "openai_responses" and previous_id:
        opts = body.get("prompt_cache_options")
        opts = opts if isinstance(opts, Mapping) else {}
        if opts.get("comparison_response_id"):
            return None
        return {**body, "prompt_cache_options": {**opts, "comparison_response_id": previous_id}}
    return None


def values(found: tuple[str, int | None] | None) -> dict[str, object]:
    if found is None:
        return {}
    return {N.CACHE_MISS_REASON: found[0], N.CACHE_MISSED_TOKENS: found[1]}
