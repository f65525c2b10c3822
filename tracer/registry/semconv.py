"""The few span names llmtrace writes that the registry does not declare as values: the resource's service
name, OpenTelemetry's error type and HTTP response status (how a call failed, in OpenTelemetry's own names,
which other instrumentations write too), and the stage and phase recording stamps on every stage span (read
back as the store's ``stage`` and ``phase`` columns).

Every value the registry declares (the GenAI semantic-convention names llmtrace uses, v1.41, and the
llmtrace names on pass and stage spans) has its one constant in ``names.py``, generated from the registry:
``from llmtrace.tracer.registry import names as N``. This module spells no name ``names.py`` has, so one
name has one constant."""

from __future__ import annotations

from typing import Final

SERVICE_NAME: Final = "service.name"
ERROR_TYPE: Final = "error.type"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
LLMTRACE_STAGE: Final = "llmtrace.stage"
LLMTRACE_PHASE: Final = "llmtrace.phase"
