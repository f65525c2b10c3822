"""Finish reasons and refusals in the shapes other instrumentations record them: a list, a string, a list
serialised into a string (LiteLLM's ``'["length"]'``), a response body kept as JSON text (OpenInference's
``output.value``), the newer GenAI semconv's ``gen_ai.output.messages`` (one ``finish_reason`` per choice),
per-choice ``gen_ai.choice`` span events; and the HTTP status of a refused call, which they leave only in the
span's status message or the exception's class."""

from __future__ import annotations

import json
import re
from typing import Any

_STATUS_CODE = re.compile(r"\b(?:Error code|status(?: code)?|HTTP)[: ]+([1-5]\d\d)\b", re.IGNORECASE)

# The openai SDK's (and LiteLLM's, which copies it) exception class for each HTTP status it raises on.
_STATUS_OF_ERROR = {"BadRequestError": 400, "AuthenticationError": 401, "PermissionDeniedError": 403,
                    "NotFoundError": 404, "ConflictError": 409, "UnprocessableEntityError": 422,
                    "RateLimitError": 429, "InternalServerError": 500, "ServiceUnavailableError": 503}


def http_status(message: str, error_type: object) -> int | None:
    """The HTTP status of a refused call: the openai SDK's message ("Error code: 429 - ...") says it; else the
    exception's class does (``error.type`` as OpenLLMetry, LiteLLM or openai-v2's ``<class 'openai.X'>``
    write it). The instrumentations leave it nowhere else."""
    m = _STATUS_CODE.search(message[:200])
    if m:
        return int(m.group(1))
    if isinstance(error_type, str):
        name = error_type.strip("<>' ").removeprefix("class '").rsplit(".", 1)[-1]
        return _STATUS_OF_ERROR.get(name)
    return None


def reason_list(value: object) -> list[str] | None:
    """A finish reason in any shape as a list of strings: ``["length"]``, ``"length"``, ``'["length"]'``."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                return [text]
        else:
            return [text]
    if isinstance(value, (list, tuple)):
        out = [str(v) for v in value if v is not None and str(v).strip()]
        return out or None
    return [str(value)]


def _bounded_json(value: object, opener: str) -> object:
    """``value`` parsed, when it is JSON text opening with ``opener`` and at most 1 MiB; else None."""
    if not isinstance(value, str) or not value.startswith(opener) or len(value) > (1 << 20):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def body_reasons(body: object) -> list[str] | None:
    """The finish reason inside a response body recorded as JSON text (OpenInference's ``output.value``):
    chat choices, Anthropic's ``stop_reason``, the Responses API's ``incomplete_details`` or ``status``."""
    doc = _bounded_json(body, "{")
    if not isinstance(doc, dict):
        return None
    choices = doc.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and choices[0].get("finish_reason"):
        return [str(c.get("finish_reason")) for c in choices if isinstance(c, dict) and c.get("finish_reason")]
    if isinstance(doc.get("stop_reason"), str):
        return [doc["stop_reason"]]
    incomplete = doc.get("incomplete_details")
    if isinstance(incomplete, dict) and isinstance(incomplete.get("reason"), str):
        return [incomplete["reason"]]  # max_output_tokens: the length cap
    if doc.get("object") == "response" and doc.get("status") == "completed":
        return ["completed"]
    return None


def message_reasons(value: object) -> list[str] | None:
    """Each choice's finish reason from the newer GenAI semconv's ``gen_ai.output.messages`` JSON (one
    message per choice, ``finish_reason`` on each): opentelemetry-instrumentation-openai-v2 writes streamed
    calls' reasons only there, never in ``gen_ai.response.finish_reasons``."""
    msgs = _bounded_json(value, "[")
    if not isinstance(msgs, list):
        return None
    out = [str(m["finish_reason"]) for m in msgs if isinstance(m, dict) and m.get("finish_reason")]
    return out or None


def event_reasons(events: Any) -> list[str] | None:  # repeated OTLP Event (protobuf, untyped)
    """Finish reasons on per-choice span events (the older GenAI semconv's ``gen_ai.choice`` with a
    ``finish_reason`` attribute), in the order the choices came."""
    out: list[str] = []
    for e in events or ():
        if e.name != "gen_ai.choice":
            continue
        for kv in e.attributes:
            if kv.key == "finish_reason" and kv.value.string_value:
                out.append(kv.value.string_value)
    return out or None
