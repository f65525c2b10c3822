"""API errors, rendered in the error shape of the API the client spoke (OpenAI or Anthropic)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

Api = Literal["openai", "anthropic"]

# Anthropic names its error types after the situation, not the status code.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    408: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    """A request the server answers with an HTTP error; ``param`` names the offending field when known."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class ErrorBody:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]


def render_error(err: APIError, api: Api) -> ErrorBody:
    if api == "anthropic":
        payload: dict[str, object] = {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(err.status, "api_error"), "message": err.message},
        }
    else:
        payload = {
            "error": {
                "message": err.message,
                "type": _OPENAI_TYPES.get(err.status, "invalid_request_error"),
                "param": err.param,
                "code": err.code,
            }
        }
    headers: list[tuple[str, str]] = [("content-type", "application/json")]
    if err.retry_after_s is not None:
        headers.append(("retry-after", str(max(1, round(err.retry_after_s)))))
    return ErrorBody(err.status, json.dumps(payload).encode(), tuple(headers))


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param, code="invalid_value" if param else None)


def internal_error(trace_id: str | None = None) -> APIError:
    """The 500 a client sees for a server fault: a generic message (the detail is logged, not sent, since it
    can quote internals) with the trace id to look it up by."""
    where = f" (trace {trace_id})" if trace_id else ""
    return APIError(500, f"the server failed to handle the request{where}; the details are in its log")
