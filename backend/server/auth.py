"""``--api-key``: every route but ``/health`` wants the key, as OpenAI clients send it
(``Authorization: Bearer KEY``) or as Anthropic clients do (``x-api-key: KEY``); anything else gets a 401 in
the error shape of the API the path belongs to. ASGI middleware, so a refused request costs no body read,
no span and no queue slot."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from llmtrace.backend.server.asgi_io import Receive, Scope, Send, header, send_bytes
from llmtrace.backend.server.errors import APIError, render_error

OPEN_PATHS = frozenset({"/health"})  # load balancers probe it without credentials
KEY_ENV = "LLMTRACE_API_KEY"


class ApiKeyGuard:
    def __init__(self, app: Any, key: str) -> None:
        if not key:
            raise ValueError("the API key must not be empty")
        self.app = app
        self._key = key.encode()
        self.refused_total = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS or self._accepts(scope):
            await self.app(scope, receive, send)
            return
        self.refused_total += 1
        anthropic = str(scope.get("path", "")).startswith("/v1/messages")
        given = header(scope, "x-api-key") is not None or header(scope, "authorization") is not None
        message = ("invalid API key" if given else
                   "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
        err = APIError(401, message, code="invalid_api_key")
        r = render_error(err, "anthropic" if anthropic else "openai")
        await send_bytes(send, r.status, r.body, [*r.headers, ("www-authenticate", 'Bearer realm="llmtrace"')])

    def _accepts(self, scope: Scope) -> bool:
        candidates = []
        auth = header(scope, "authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() == "bearer":
                candidates.append(token.strip())
        api_key = header(scope, "x-api-key")
        if api_key is not None:
            candidates.append(api_key.strip())
        # compare_digest: the time taken does not tell how much of a guess was right.
        return any(hmac.compare_digest(c.encode("latin-1", "replace"), self._key) for c in candidates)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
