"""The Starlette application: routes for both APIs, /v1/models, /health and /metrics."""

from __future__ import annotations

import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from llmtrace.backend.server import metrics, responses_routes, token_count
from llmtrace.backend.server.asgi_io import Receive, Scope, Send
from llmtrace.backend.server.errors import Api, APIError, internal_error, render_error
from llmtrace.backend.server.service import GenerationService


class _Endpoint:
    """An ASGI endpoint (not request/response): the service needs ``receive`` to notice a client leaving."""

    def __init__(self, service: GenerationService, endpoint: str) -> None:
        self.service = service
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.service.handle(self.endpoint, scope, receive, send)


def build_app(service: GenerationService) -> Starlette:
    created = int(time.time())

    def _model_entry(model_id: str, owner: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": owner,
                "max_model_len": service.max_model_len}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model_entry(m, o) for m, o in service.router.listed()]})

    async def model(request: Request) -> Response:
        wanted = request.path_params["model_id"]
        for m, o in service.router.listed():
            if m == wanted:
                return JSONResponse(_model_entry(m, o))
        try:
            service.router.route(wanted)
        except APIError as err:
            r = render_error(err, "openai")
            return Response(r.body, r.status, headers=dict(r.headers))
        return JSONResponse(_model_entry(wanted, "llmtrace"))

    async def health(request: Request) -> Response:
        if service.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok", "replicas": len(service.replicas), "in_flight": service.in_flight})

    async def stats(request: Request) -> Response:
        """Engine counters per replica (block pool, prefix cache) plus the server's own; JSON for tools and tests."""
        a = service.admission
        return JSONResponse({
            "draining": service.draining, "in_flight": service.in_flight,
            "admission": {"running": a.running, "queued": a.queued, "max_running": a.max_running,
                          "max_queued": a.max_queued, "shed_total": a.shed_total, "admitted_total": a.admitted_total},
            "connections": {"opened": service.connections.opened_total, "reused": service.connections.reused_total},
            "requests": dict(service.counts),
            "replicas": {r.id: {**r.stats(), "in_flight": r.in_flight, "served": r.served_total}
                         for r in service.replicas},
        })

    async def prometheus(request: Request) -> Response:
        return PlainTextResponse(metrics.render(service), media_type="text/plain; version=0.0.4")

    async def count_tokens(request: Request) -> Response:
        return await token_count.count_tokens(service, request)

    async def retrieve_response(request: Request) -> Response:
        return await responses_routes.retrieve(service.responses, request)

    async def delete_response(request: Request) -> Response:
        return await responses_routes.delete(service.responses, request)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        api: Api = "anthropic" if request.url.path.startswith("/v1/messages") else "openai"
        message = "no such route" if status == 404 else "method not allowed" if status == 405 else str(exc)
        r = render_error(APIError(status, f"{message}: {request.method} {request.url.path}"), api)
        return Response(r.body, r.status, headers=dict(r.headers))

    routes = [
        Route("/v1/chat/completions", _Endpoint(service, "chat"), methods=["POST"]),
        Route("/v1/completions", _Endpoint(service, "completions"), methods=["POST"]),
        Route("/v1/messages", _Endpoint(service, "messages"), methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses", _Endpoint(service, "responses"), methods=["POST"]),
        Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
    ]
    async def server_error(request: Request, exc: Exception) -> Response:
        # Whatever escaped a handler: a generic 500 in the API's shape; the detail stays in the log.
        api: Api = "anthropic" if request.url.path.startswith("/v1/messages") else "openai"
        r = render_error(internal_error(), api)
        return Response(r.body, r.status, headers=dict(r.headers))

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})
