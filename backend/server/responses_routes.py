"""``GET`` and ``DELETE /v1/responses/{id}``: a kept response read back or forgotten (``client.responses.
retrieve`` / ``.delete``). Only responses still in the server's bounded store are found."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmtrace.backend.server.errors import APIError, render_error
from llmtrace.backend.server.responses_store import ResponsesStore


def _not_found(response_id: str) -> Response:
    r = render_error(APIError(404, f"Response with id '{response_id}' not found.", param="response_id"), "openai")
    return Response(r.body, r.status, headers=dict(r.headers))


async def retrieve(store: ResponsesStore, request: Request) -> Response:
    response_id = request.path_params["response_id"]
    body = store.response(response_id)
    if body is None:
        return _not_found(response_id)
    return Response(body, 200, media_type="application/json")


async def delete(store: ResponsesStore, request: Request) -> Response:
    response_id = request.path_params["response_id"]
    if not store.delete(response_id):
        return _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})
