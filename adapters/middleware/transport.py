"""The one choke point: an httpx transport that wraps the client's own transport.

``handle_request`` opens a ``Call`` for inference requests (others pass straight through), injects
``traceparent``, and wraps the response's byte stream so the parser sees each chunk as the app reads it.
The app receives the very same bytes objects, in the same order; exceptions from the wrapped transport
or stream are recorded and re-raised unchanged.

The OpenAI and Anthropic SDKs may run on ``httpx`` or its successor ``httpx2``; both check that a
response stream is an instance of *their* ``SyncByteStream``/``AsyncByteStream``, so the stream wrapper
class is derived at run time from the base class the wrapped stream already has.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from llmtrace.adapters.middleware.call import Call
from llmtrace.adapters.middleware.call_record import Options
from llmtrace.adapters.middleware.protocol import parser_for
from llmtrace.tracer import health


def _open_call(request: Any, opts: Options) -> Call | None:
    try:
        parser = parser_for(request.method, request.url.path)
        if parser is None:
            return None
        return Call(parser, request, opts)
    except Exception as exc:
        health.count(
            "adapter_error", message=f"adapter could not open a call record: {type(exc).__name__}: {exc}"
        )
        return None


# ── stream wrappers ──────────────────────────────────────────────────────────────────────────
class _StreamMixin:
    # No __slots__ here: the class it is mixed into (httpx's byte stream) has a __dict__ anyway.

    def __init__(self, inner: Any, call: Call) -> None:
        self._inner = inner
        self._call = call


# The chunk loops stay written out twice (sync and async): a shared helper would cost a call per chunk.
# Each has two loops, chosen once per stream: as the chunks came, or without the usage the middleware
# asked for (``call.strip``, set before the stream is wrapped and not changed after).
class _SyncStreamMixin(_StreamMixin):
    __slots__ = ()

    def __iter__(self) -> Iterator[bytes]:
        call = self._call
        strip = call.strip
        try:
            if strip is None:
                for chunk in self._inner:
                    call.feed(chunk)
                    yield chunk
            else:
                for chunk in self._inner:
                    call.feed(chunk)
                    out = strip.feed(chunk)
                    if out:
                        yield out
                tail = strip.flush()
                if tail:
                    yield tail
        except GeneratorExit:
            raise
        except BaseException as exc:
            call.finish_error(exc)
            raise
        call.finish_eof()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._call.finish_closed()


class _AsyncStreamMixin(_StreamMixin):
    __slots__ = ()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        call = self._call
        strip = call.strip
        try:
            if strip is None:
                async for chunk in self._inner:
                    call.feed(chunk)
                    yield chunk
            else:
                async for chunk in self._inner:
                    call.feed(chunk)
                    out = strip.feed(chunk)
                    if out:
                        yield out
                tail = strip.flush()
                if tail:
                    yield tail
        except GeneratorExit:
            raise
        except BaseException as exc:
            call.finish_error(exc)
            raise
        call.finish_eof()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._call.finish_closed()


_stream_classes: dict[tuple[type, type], type] = {}


def _wrapper_class(inner: Any, name: str, mixin: type) -> type:
    """A subclass of the stream's own ``SyncByteStream``/``AsyncByteStream`` base with our behaviour."""
    base = next((c for c in type(inner).__mro__ if c.__name__ == name), None)
    if base is None:
        base = httpx.SyncByteStream if name == "SyncByteStream" else httpx.AsyncByteStream
    cls = _stream_classes.get((base, mixin))
    if cls is None:
        cls = _stream_classes[base, mixin] = type(f"Instrumented{name}", (mixin, base), {})
    return cls


def _trace_hook_sync(call: Call, previous: Any) -> Any:
    def hook(name: str, info: dict[str, Any]) -> None:
        call.conn.event(name)
        if previous is not None:
            previous(name, info)

    return hook


def _trace_hook_async(call: Call, previous: Any) -> Any:
    async def hook(name: str, info: dict[str, Any]) -> None:
        call.conn.event(name)
        if previous is not None:
            await previous(name, info)

    return hook


def _hook_trace(request: Any, call: Call, make_hook: Any) -> None:
    """Chain our connection-event hook in front of any ``trace`` extension the app set."""
    try:
        request.extensions = {**request.extensions, "trace": make_hook(call, request.extensions.get("trace"))}
    except Exception as exc:
        call._fault(exc)


def _wrap_stream(response: Any, call: Call, name: str, mixin: type) -> None:
    """Note the headers and swap the response's byte stream for our wrapper around it."""
    call.on_headers(response)
    content = getattr(response, "_content", None)
    if isinstance(content, bytes):
        # Already read (httpx.Response(content=...), MockTransport, caching transports): the app will take
        # these bytes without iterating the stream, so the call is read and finished here, once.
        call.strip = None  # nothing to hide: the include_usage chunk of a pre-read body stays as it came
        call.feed(content)
        call.finish_eof()
        return
    try:
        wrapper = _wrapper_class(response.stream, name, mixin)(response.stream, call)
        # A response dropped unread and unclosed still ends its span (as cancelled) when collected.
        weakref.finalize(wrapper, call.finish_closed)
        response.stream = wrapper
    except Exception as exc:
        call._fault(exc)


# ── transports ───────────────────────────────────────────────────────────────────────────────
class _Wrapping:
    """What both transports share: the wrapped transport, the options, and pass-through of the rest."""

    def __init__(self, inner: Any, options: Options | None = None) -> None:
        self.inner = inner
        self.options = options or Options()

    def __getattr__(self, name: str) -> Any:  # pool settings, proxies, ... of the wrapped transport
        if name == "inner":  # not set yet: fail here rather than recurse
            raise AttributeError(name)
        return getattr(self.inner, name)


class InstrumentedTransport(_Wrapping, httpx.BaseTransport):
    """Wraps a synchronous transport (``httpx.HTTPTransport``, ``httpx2.HTTPTransport``, or any other)."""

    def handle_request(self, request: Any) -> Any:
        call = _open_call(request, self.options)
        if call is None:
            return self.inner.handle_request(request)
        _hook_trace(request, call, _trace_hook_sync)
        try:
            response = self.inner.handle_request(request)
        except BaseException as exc:
            call.finish_error(exc)
            raise
        _wrap_stream(response, call, "SyncByteStream", _SyncStreamMixin)
        return response

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> InstrumentedTransport:
        self.inner.__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        self.inner.__exit__(*args)


class AsyncInstrumentedTransport(_Wrapping, httpx.AsyncBaseTransport):
    """Wraps an asynchronous transport."""

    async def handle_async_request(self, request: Any) -> Any:
        call = _open_call(request, self.options)
        if call is None:
            return await self.inner.handle_async_request(request)
        _hook_trace(request, call, _trace_hook_async)
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            call.finish_error(exc)
            raise
        _wrap_stream(response, call, "AsyncByteStream", _AsyncStreamMixin)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AsyncInstrumentedTransport:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *args: Any) -> None:
        await self.inner.__aexit__(*args)
