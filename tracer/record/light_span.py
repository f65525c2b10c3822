"""Stage spans without the SDK's per-span machinery, handed to the same processors as SDK spans.

A stage span is a child of a pass span, carries values the registry has already checked, and is ended by
the thread that started it. The SDK's ``Tracer.start_span`` spends most of its ~12 µs on work such a span
does not need (a sampler call, a fresh lock, attribute validation through ``BoundedAttributes``, a second
copy into a ``ReadableSpan``), so llmtrace builds these spans itself: ids from the provider's id
generator, the parent's trace flags (the default ``ParentBased`` sampler's decision for a sampled local
parent), the provider's resource, and a public ``ReadableSpan`` handed to each of llmtrace's own
processors. Pass spans, root spans, remote parents and providers set up differently keep the SDK path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util import types

# The sampler decision we reproduce: a sampled local parent's child is sampled, an unsampled one's is not.
_PARENT_BASED_PREFIX = "ParentBased{root:"
_LOCAL_PARENT_RULE = "localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler"
_UNSET = Status(StatusCode.UNSET)
_SCALARS = (str, bool, int, float)


@dataclass(frozen=True, slots=True)
class Sink:
    """Where light spans go: the provider (for its resource and id generator) and its processors."""

    provider: TracerProvider
    processors: tuple[SpanProcessor, ...]
    scope: InstrumentationScope

    @classmethod
    def for_provider(cls, provider: TracerProvider, processors: Sequence[SpanProcessor]) -> Sink | None:
        """A sink when light spans would be recorded exactly as the SDK records them, else None."""
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        description = provider.sampler.get_description()
        if not (description.startswith(_PARENT_BASED_PREFIX) and _LOCAL_PARENT_RULE in description):
            return None
        return cls(provider, tuple(processors), InstrumentationScope("llmtrace"))

    def emit(self, span: ReadableSpan) -> None:
        for p in self.processors:
            p.on_end(span)


def child_context(sink: Sink, parent: SpanContext) -> SpanContext | None:
    """The context of a new child of ``parent``; None when the SDK path must decide (remote or invalid)."""
    if parent.is_remote or not parent.is_valid:
        return None
    return SpanContext(parent.trace_id, sink.provider.id_generator.generate_span_id(), False,
                       parent.trace_flags, parent.trace_state)


def valid_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """What ``BoundedAttributes`` would keep: scalars and homogeneous sequences; other sequences as strings."""
    for k, v in attrs.items():
        if type(v) is list and v and not _homogeneous(v):
            attrs[k] = [None if x is None else str(x) for x in v]
    return attrs


def _homogeneous(values: list[Any]) -> bool:
    first = None
    for x in values:
        if x is None:
            continue
        t = type(x)
        if t not in _SCALARS:
            return False
        if first is None:
            first = t
        elif t is not first:
            return False
    return True


def finished(sink: Sink, name: str, ctx: SpanContext, parent: SpanContext, attributes: dict[str, Any],
             start_ns: int, end_ns: int, status: Status = _UNSET, events: Sequence[Event] = (),
             kind: SpanKind = SpanKind.INTERNAL) -> ReadableSpan:
    return ReadableSpan(name=name, context=ctx, parent=parent, resource=sink.provider.resource,
                        attributes=attributes, events=events, kind=kind, status=status, start_time=start_ns,
                        end_time=end_ns, instrumentation_scope=sink.scope)


class LightSpan(trace.Span):
    """A live stage span (``stage()``, ``tool_span()``): an OpenTelemetry API span, so it can be made
    current and parent SDK spans; on ``end`` it becomes a ``ReadableSpan`` for the processors."""

    def __init__(self, sink: Sink, name: str, ctx: SpanContext, parent: SpanContext, attributes: dict[str, Any],
                 kind: SpanKind = SpanKind.INTERNAL) -> None:
        self._sink = sink
        self._name = name
        self._ctx = ctx
        self._parent = parent
        self._attrs = attributes
        self._kind = kind
        self._status = _UNSET
        self._events: list[Event] | None = None
        self._start = time.time_ns()
        self._end: int | None = None

    def get_span_context(self) -> SpanContext:
        return self._ctx

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._end is None:
            self._attrs[key] = value

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self._end is None:
            self._attrs.update(attributes)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self._end is None:
            if self._events is None:
                self._events = []
            self._events.append(Event(name, attributes, timestamp))

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end is not None or self._status.status_code is StatusCode.OK:
            return  # like the SDK: OK is final
        if not isinstance(status, Status):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(self, exception: BaseException, attributes: types.Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        attrs: dict[str, Any] = {"exception.type": type(exception).__qualname__, "exception.message": str(exception),
                                 "exception.escaped": str(escaped)}
        attrs.update(attributes or {})
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = end = end_time if end_time is not None else time.time_ns()
        self._sink.emit(finished(self._sink, self._name, self._ctx, self._parent, valid_attributes(self._attrs),
                                 self._start, end, self._status, tuple(self._events or ()), self._kind))
