"""A foreign ``execute_tool`` span's argument and result digests, as the middleware writes them
(``record/tool_digest.py``): what tells a loop from fan-out on agent spans other projects recorded.

Where each instrumentation puts a tool call's arguments and result: OpenTelemetry GenAI
(``gen_ai.tool.call.arguments`` / ``.result``), OpenInference (``input.value`` / ``output.value`` of a TOOL
span), OpenLLMetry's ``@tool`` (``traceloop.entity.input`` / ``.output``). A span that ended in an error
digests its error type (or status message) as its result, so the same error again is the same digest; the
result's kind (value, empty, error) goes beside it.
"""

from __future__ import annotations

from llmtrace.tracer.reading import tool_digest
from llmtrace.tracer.registry import names as N

_ARGUMENT_KEYS = ("gen_ai.tool.call.arguments", "input.value", "traceloop.entity.input")
_RESULT_KEYS = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
_REDACTED = frozenset({"__REDACTED__", "redacted-by-litellm"})  # a content switch's marker: no text to digest


def _first(attrs: dict[str, object], keys: tuple[str, ...]) -> object:
    for k in keys:
        v = attrs.get(k)
        if v is not None and v != "" and not (isinstance(v, str) and v in _REDACTED):
            return v
    return None


def tool_values(attrs: dict[str, object], status_message: str | None = None) -> dict[str, object]:
    """The ``loop.tool_dispatch`` digests of a foreign tool span (read from its raw attributes before the
    capture mode drops their text); empty where it recorded neither."""
    out: dict[str, object] = {}
    args = _first(attrs, _ARGUMENT_KEYS)
    if args is not None:
        out[N.TOOL_ARGUMENTS_HASH] = tool_digest.arguments_digest(args)
    error = attrs.get("error.type") or status_message
    result = _first(attrs, _RESULT_KEYS)
    if error:
        out[N.TOOL_RESULT_HASH] = tool_digest.result_digest(None, str(error), args)
        out[N.TOOL_RESULT_KIND] = "error"
    elif result is not None:
        # (an error returned as the result, {"error": ...} or "Error: ...", digests as one: tool_digest.py)
        out[N.TOOL_RESULT_HASH] = tool_digest.result_digest(result, None, args)
        out[N.TOOL_RESULT_KIND] = tool_digest.result_kind(result)
    return {k: v for k, v in out.items() if v is not None}
