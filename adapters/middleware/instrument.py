"""``instrument(client)``: swap the transport of an OpenAI / Anthropic SDK client or a plain httpx client,
or of the SDK clients inside a LangChain chat model or LiteLLM (see ``integrations``).

The SDKs are optional: nothing here imports them. A client is recognised by what it holds — an SDK
client keeps its HTTP client in ``_client``; an HTTP client (``httpx`` or ``httpx2``) keeps its transport
in ``_transport`` and proxy transports in ``_mounts``. Instrumenting twice changes nothing.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from llmtrace.adapters.middleware import integrations
from llmtrace.adapters.middleware.call_record import DEFAULT_HIDDEN_STAGES, Options
from llmtrace.adapters.middleware.transport import AsyncInstrumentedTransport, InstrumentedTransport
from llmtrace.tracer.record import prices

C = TypeVar("C")

_INSTRUMENTED = (InstrumentedTransport, AsyncInstrumentedTransport)


def _is_http_client(obj: object) -> bool:
    return hasattr(obj, "_transport") and (hasattr(obj, "send") or hasattr(obj, "request"))


def _provider_of(client: object) -> str | None:
    root = type(client).__module__.split(".", 1)[0]
    return root if root in ("openai", "anthropic") else None


def _wrap(transport: Any, options: Options, is_async: bool) -> Any:
    """The transport wrapped for the kind of client that holds it. A transport may offer both verbs
    (``httpx.MockTransport`` does): the client's kind decides which one it is called through."""
    if transport is None or isinstance(transport, _INSTRUMENTED):
        return transport
    if is_async and hasattr(transport, "handle_async_request"):
        return AsyncInstrumentedTransport(transport, options)
    if not is_async and hasattr(transport, "handle_request"):
        return InstrumentedTransport(transport, options)
    verb = "handle_async_request" if is_async else "handle_request"
    raise ValueError(f"cannot instrument transport of type {type(transport).__name__}: no {verb}")


def http_client_of(client: object) -> Any:
    """The httpx-style client an SDK client talks through (or ``client`` itself when it is one)."""
    if _is_http_client(client):
        return client
    inner = getattr(client, "_client", None)
    if inner is not None and _is_http_client(inner):
        return inner
    name = client.__name__ if isinstance(client, types.ModuleType) else f"{type(client).__module__}.{type(client).__qualname__}"
    raise ValueError(f"cannot instrument {name}: expected {integrations.WHAT_TO_PASS}")


def _http_clients(client: object) -> list[tuple[Any, str | None]]:
    """(HTTP client, provider) pairs to instrument for ``client``: itself, or what a framework holds."""
    framework = integrations.framework_of(client)
    if framework is None:
        return [(http_client_of(client), _provider_of(client))]
    inner = integrations.inner_clients(client, framework)
    if not inner:
        raise ValueError(
            f"cannot instrument {framework} object {type(client).__qualname__}: it holds no client yet; "
            f"pass {integrations.WHAT_TO_PASS}"
        )
    return [(http_client_of(c), provider or _provider_of(c)) for c, provider in inner]


def _is_async_client(http: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(http, "send", None))


def instrument(
    client: C,
    *,
    provider: str | None = None,
    hidden_stages: tuple[str, ...] | None = None,
    inject_traceparent: bool = True,
    request_usage: bool = True,
    cache_diagnostics: bool = False,
    tokenizer: Callable[[str], int] | None = None,
) -> C:
    """Record every inference call ``client`` makes; returns the same client.

    ``provider`` names the ``gen_ai.provider.name`` (default: from the SDK, else from the protocol).
    ``hidden_stages``: stage ids marked unobserved on each client pass (default: admission, prefill,
    decode — what a hosted provider hides); pass ``()`` to mark none.
    ``request_usage``: add ``stream_options.include_usage`` to OpenAI-style streams that lack it (the app
    still reads exactly the chunks it would without it); False leaves requests untouched.
    ``cache_diagnostics``: ask the provider for its cache-miss diagnostics where it supports them.
    ``tokenizer``: counts tokens of a text when the provider reports no usage (estimated counts).
    """
    prices.warm_up()
    if integrations.framework_of(client) == "litellm":
        integrations.prepare_litellm(client, httpx.Client, httpx.AsyncClient)
    for http, found in _http_clients(client):
        options = Options(
            provider=provider or found,
            hidden_stages=DEFAULT_HIDDEN_STAGES if hidden_stages is None else tuple(hidden_stages),
            inject_traceparent=inject_traceparent,
            request_usage=request_usage,
            cache_diagnostics=cache_diagnostics,
            tokenizer=tokenizer,
        )
        is_async = _is_async_client(http)
        http._transport = _wrap(http._transport, options, is_async)
        mounts = getattr(http, "_mounts", None)
        if isinstance(mounts, dict):
            for pattern, transport in list(mounts.items()):
                mounts[pattern] = _wrap(transport, options, is_async)
    return client


def is_instrumented(client: object) -> bool:
    try:
        return all(isinstance(http._transport, _INSTRUMENTED) for http, _ in _http_clients(client))
    except ValueError:
        return False


def uninstrument(client: C) -> C:
    """Put the original transports back."""
    for http, _ in _http_clients(client):
        if isinstance(http._transport, _INSTRUMENTED):
            http._transport = http._transport.inner
        mounts = getattr(http, "_mounts", None)
        if isinstance(mounts, dict):
            for pattern, transport in list(mounts.items()):
                if isinstance(transport, _INSTRUMENTED):
                    mounts[pattern] = transport.inner
    return client
