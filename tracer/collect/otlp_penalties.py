"""The penalties a foreign span says its request asked for, as ``gen.penalties`` (the middleware's stage,
adapters/client_stages.py): frequency and presence penalties (OTel GenAI ``gen_ai.request.*_penalty``,
OpenInference's ``llm.invocation_parameters`` JSON, which also carries ``repetition_penalty`` when an app sent
one as an extra field) and whether the request asked for structured output (OpenLLMetry's
``gen_ai.request.structured_output_schema``, OTel GenAI ``gen_ai.output.type``, a ``response_format`` in the
invocation parameters; LiteLLM's raw request payload span). Only numbers and a flag, so under every capture
mode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from llmtrace.tracer.registry import names as N

_STRUCTURED_FORMATS = ("json_schema", "json_object", "json")
_FORMAT_TYPE = re.compile(r"""['"]type['"]\s*:\s*['"](\w+)['"]""")


def _num(value: object) -> float | None:
    if value is None or isinstance(value, bool):  # None first: float(None) raises, ~1 us a pass span thrice
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _invocation(attrs: Mapping[str, object]) -> Mapping[str, object]:
    raw = attrs.get("llm.invocation_parameters")
    if isinstance(raw, str) and raw[:1] == "{":
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, Mapping) else {}


def _structured(attrs: Mapping[str, object], params: Mapping[str, object]) -> bool | None:
    """True when the request asked for structured output, False when it said another type, None: not said."""
    if attrs.get("gen_ai.request.structured_output_schema") or attrs.get("gen_ai.request.response_format"):
        return True
    out = attrs.get(N.GEN_AI_OUTPUT_TYPE)
    if isinstance(out, str) and out:
        return out == "json"
    fmt = params.get("response_format")
    if isinstance(fmt, Mapping):
        return fmt.get("type") in _STRUCTURED_FORMATS
    if isinstance(fmt, str):  # a name, or a payload written as text (LiteLLM writes Python's repr of the dict)
        m = _FORMAT_TYPE.search(fmt)
        return (m.group(1) if m else fmt) in _STRUCTURED_FORMATS
    return None


_RAW_KEY = re.compile(r"^llm\.[\w-]+\.(frequency_penalty|presence_penalty|repetition_penalty|response_format)$")


def raw_penalty_values(attrs: Mapping[str, object]) -> dict[str, object] | None:
    """The same of a raw request payload span (LiteLLM's ``raw_gen_ai_request``: ``llm.<provider>.<field>``)."""
    params: dict[str, object] = {}
    for key, value in attrs.items():
        m = _RAW_KEY.match(key)
        if m:
            params[m.group(1)] = _json(value) if m.group(1) == "response_format" else value
    return penalty_values({}, params) if params else None


def _json(value: object) -> object:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def penalty_values(attrs: Mapping[str, object], params: Mapping[str, object] | None = None) -> dict[str, object] | None:
    """``gen.penalties`` values of a chat span whose request named a penalty, or None (``params``: the request's
    fields when the caller read them elsewhere, else the span's OpenInference invocation parameters)."""
    params = _invocation(attrs) if params is None else params
    freq = _num(attrs.get(N.GEN_AI_REQUEST_FREQUENCY_PENALTY, params.get("frequency_penalty")))
    pres = _num(attrs.get(N.GEN_AI_REQUEST_PRESENCE_PENALTY, params.get("presence_penalty")))
    rep = _num(params.get("repetition_penalty"))
    if freq is None and pres is None and rep is None:
        return None
    structured = _structured(attrs, params)
    # a penalty sent as 0 (or a repetition penalty of 1) is off: it bends no structure
    active = bool(freq or pres or (rep is not None and rep != 1.0))
    values: dict[str, object] = {N.GEN_AI_REQUEST_FREQUENCY_PENALTY: freq, N.GEN_AI_REQUEST_PRESENCE_PENALTY: pres,
                                 N.PENALTIES_REPETITION: rep,
                                 N.PENALTIES_ON_STRUCTURED_OUTPUT: None if structured is None else structured and active}
    return {k: v for k, v in values.items() if v is not None}
