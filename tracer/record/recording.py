"""The recording API every other part uses: pass spans, stage spans, after-the-fact stages, tools.

A *pass* is one inference pass (one GenAI ``chat {model}`` span). Stage spans hang under it, one per
stage, carrying the stage's boundary values. Values are checked against the registry: a wrong type is
dropped and counted (never raised into user code); an unknown stage id raises in strict mode (tests)
and is counted otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token
from typing import Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from llmtrace.tracer.record import capture, health
from llmtrace.tracer.record import light_span as light
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.stages import (
    COMMON_VALUES,
    STAGES,
    BoundaryValue,
    UnknownStageError,
    declared_value,
)

Side = Literal["client", "server", "app"]
SpanStatus = Literal["ok", "error", "cancelled"]

_SPECS: dict[str, tuple[str, dict[str, BoundaryValue]]] = {
    s.id: (s.phase, {v.name: v for v in (*s.values, *COMMON_VALUES)}) for s in STAGES}
_propagator = TraceContextTextMapPropagator()
_KIND = {"client": SpanKind.CLIENT, "server": SpanKind.SERVER, "app": SpanKind.INTERNAL}
_state: dict[str, Any] = {"tracer": None, "strict": False, "sink": None}
# Exact types that pass a value type's check at once; anything else goes through BoundaryValue.accepts.
_FAST_TYPES: dict[str, frozenset[type]] = {"str": frozenset({str}), "int": frozenset({int}),
                                           "float": frozenset({float, int}), "bool": frozenset({bool})}
_FAST: dict[str, dict[str, frozenset[type]]] = {
    sid: {n: _FAST_TYPES.get(bv.type, frozenset()) for n, bv in specs.items()} for sid, (_, specs) in _SPECS.items()}
_OK_STATUS = Status(StatusCode.UNSET)


def configure(tracer: trace.Tracer | None, *, strict: bool = False, sink: light.Sink | None = None) -> None:
    """Called by ``llmtrace.init``; before that the global OpenTelemetry tracer is used. With a ``sink``
    (llmtrace's own provider and processors) stage spans take the light path (tracer/record/light_span.py)."""
    _state["tracer"] = tracer
    _state["strict"] = strict
    _state["sink"] = sink if tracer is not None else None


def _tracer() -> trace.Tracer:
    t = _state["tracer"]
    return t if t is not None else trace.get_tracer("llmtrace")


def now_ns() -> int:
    return time.time_ns()


def _clean(value: object) -> AttributeValue:
    """OpenTelemetry attributes take scalars and homogeneous sequences; tuples become lists on export."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return list(value)
    return str(value)


def checked_values(stage_id: str, values: Mapping[str, object] | None) -> dict[str, Any]:
    """Attributes for a stage span: stage/phase plus the values whose types match the registry (checked here,
    at run time, so the dict is typed Any: each value is an OpenTelemetry attribute value)."""
    spec = _SPECS.get(stage_id)
    if spec is None:
        if _state["strict"]:
            raise UnknownStageError(f"unknown stage id {stage_id!r}; see `llmtrace stages`")
        health.count("unknown_stage", message=f"unknown stage id {stage_id!r} recorded without a phase")
        spec = ("unknown", {})
    phase, specs = spec
    attrs: dict[str, Any] = {sc.LLMTRACE_STAGE: stage_id, sc.LLMTRACE_PHASE: phase}
    if values:
        fast = _FAST.get(stage_id, {})
        for name, value in values.items():
            if value is None:
                continue
            t = type(value)
            if t in fast.get(name, ()):  # the common case: a declared value of exactly its type
                attrs[name] = value
                continue
            bv = specs.get(name)
            if bv is not None and not bv.accepts(value):
                if _state["strict"]:
                    raise UndeclaredValueError(f"{stage_id}: {name}={value!r} is not {bv.type} as the registry says")
                health.count(
                    "wrong_value_type",
                    message=f"{stage_id}: {name}={value!r} is not {bv.type}; value dropped",
                )
                continue
            if bv is None and name.startswith(_OURS):
                _undeclared(f"{stage_id}: {name}")
            attrs[name] = _clean(value)
    return attrs


class UndeclaredValueError(ValueError):
    """Strict mode (the test suite): a value in llmtrace's namespaces that the registry does not declare,
    or one of the wrong type. Declare it once in the registry (tracer/catalog_*.py)."""


_OURS = ("llmtrace.", "gen_ai.")  # names outside these are the app's own: recorded, never checked


def _undeclared(what: str) -> None:
    """Recorded anyway (nothing is lost); strict mode fails, otherwise it is counted."""
    if _state["strict"]:
        raise UndeclaredValueError(f"{what} is not declared in the registry (tracer/catalog_*.py)")
    health.count("undeclared_value")


def _check_pass_values(values: Mapping[str, object]) -> None:
    for name in values:
        if name.startswith(_OURS) and declared_value(name) is None:
            _undeclared(f"pass span: {name}")


class StageSpan:
    """A live stage span: ``set`` adds boundary values (type-checked like the initial ones)."""

    __slots__ = ("_span", "stage_id")

    def __init__(self, span: trace.Span, stage_id: str) -> None:
        self._span = span
        self.stage_id = stage_id

    def set(self, name: str, value: object) -> None:
        for k, v in checked_values(self.stage_id, {name: value}).items():
            if k not in (sc.LLMTRACE_STAGE, sc.LLMTRACE_PHASE):
                self._span.set_attribute(k, v)

    def set_many(self, values: Mapping[str, object]) -> None:
        for name, value in values.items():
            self.set(name, value)


def _seconds(value: object) -> float | None:
    return value / 1e3 if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _latency_names(span: trace.Span) -> None:
    """The pass's latencies also under the names another OTLP backend reads (Langfuse, Phoenix, Datadog, a
    vLLM dashboard): OTel GenAI's time to first chunk and vLLM's and SGLang's ``gen_ai.latency.*``, in
    seconds, from the pass's own ``llmtrace.*`` values; every sink (the store, OTLP) gets the same span. Not
    ``gen_ai.latency.e2e``: it is the span's own length, and a clock value on the pass would make two
    recordings of one pass differ."""
    attrs = getattr(span, "attributes", None)  # an SDK span; a non-recording one has none and records nothing
    if not attrs:
        return
    ttft = _seconds(attrs.get(N.TTFT_MS))
    if ttft is not None:
        if N.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attrs:
            span.set_attribute(N.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, ttft)
        span.set_attribute(N.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN, ttft)
    queue = _seconds(attrs.get(N.ADMISSION_QUEUE_WAIT_MS))
    if queue is not None:
        span.set_attribute(N.GEN_AI_LATENCY_TIME_IN_QUEUE, queue)


class PassSpan:
    """One inference pass: a GenAI span (``chat {model}``) that stage spans hang under."""

    __slots__ = ("_span", "_ctx", "_token", "_ended")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._ctx = trace.set_span_in_context(span)
        self._token: Token[otel_context.Context] | None = None
        self._ended = False

    @property
    def trace_id(self) -> str:
        return f"{self._span.get_span_context().trace_id:032x}"

    @property
    def span_id(self) -> str:
        return f"{self._span.get_span_context().span_id:016x}"

    @property
    def context(self) -> otel_context.Context:
        return self._ctx

    @property
    def otel_span(self) -> trace.Span:
        return self._span

    def traceparent(self) -> str:
        sc_ = self._span.get_span_context()
        return f"00-{sc_.trace_id:032x}-{sc_.span_id:016x}-{int(sc_.trace_flags):02x}"

    def set(self, key: str, value: object) -> None:
        if value is not None:
            if key.startswith(_OURS) and declared_value(key) is None:
                _undeclared(f"pass span: {key}")
            self._span.set_attribute(key, _clean(value))

    def set_many(self, values: Mapping[str, object]) -> None:
        for k, v in values.items():
            self.set(k, v)

    def end(self, status: SpanStatus = "ok", message: str | None = None, end_ns: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if status == "error":
            self._span.set_status(Status(StatusCode.ERROR, message))
        elif status == "cancelled":
            self._span.set_attribute(N.STATUS, "cancelled")
            self._span.set_status(Status(StatusCode.ERROR, message or "cancelled"))
        _latency_names(self._span)
        self._span.end(end_time=end_ns)

    def __enter__(self) -> PassSpan:
        self._token = otel_context.attach(self._ctx)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if exc is not None:
            self._span.record_exception(exc)
            self._span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
            self.end("error", f"{type(exc).__name__}: {exc}")
        else:
            self.end()


def _parent_context(traceparent: str | None, parent: PassSpan | None) -> otel_context.Context | None:
    if traceparent:
        return _propagator.extract({"traceparent": traceparent})
    if parent is not None:
        return parent.context
    return None


def start_pass(
    model: str,
    *,
    operation: str = "chat",
    side: Side = "server",
    provider: str | None = None,
    traceparent: str | None = None,
    parent: PassSpan | None = None,
    start_ns: int | None = None,
    attributes: Mapping[str, object] | None = None,
) -> PassSpan:
    attrs: dict[str, AttributeValue] = {
        N.GEN_AI_OPERATION_NAME: operation,
        N.GEN_AI_REQUEST_MODEL: model,
        N.SIDE: side,
    }
    if provider:
        attrs[N.GEN_AI_PROVIDER_NAME] = provider
    if attributes:
        _check_pass_values(attributes)
        attrs.update({k: _clean(v) for k, v in attributes.items() if v is not None})
    span = _tracer().start_span(
        f"{operation} {model}",
        context=_parent_context(traceparent, parent),
        kind=_KIND.get(side, SpanKind.INTERNAL),
        attributes=attrs,
        start_time=start_ns,
    )
    return PassSpan(span)


def _parent_span_context(parent: PassSpan | None) -> trace.SpanContext:
    # ``parent.context`` is the public face of a pass span (the server hands the engine a view of its pass
    # span that has a context and setters, not the SDK span itself)
    return trace.get_current_span(parent.context if parent is not None else None).get_span_context()


def _start_child(name: str, attrs: dict[str, Any], parent: PassSpan | None,
                 kind: SpanKind = SpanKind.INTERNAL) -> trace.Span:
    """A child span of ``parent`` (or of the current span): light when llmtrace's provider records it."""
    sink = _state["sink"]
    if sink is not None:
        pctx = _parent_span_context(parent)
        ctx = light.child_context(sink, pctx)
        if ctx is not None:
            if not pctx.trace_flags.sampled:
                return trace.NonRecordingSpan(ctx)  # what the ParentBased sampler does for it
            return light.LightSpan(sink, name, ctx, pctx, attrs, kind)
    return _tracer().start_span(
        name, context=parent.context if parent is not None else None, kind=kind,
        attributes=attrs,
    )


class _StageBlock:
    """``with stage(...) as s:`` (a class, not a generator: this runs for every stage span)."""

    __slots__ = ("_stage_id", "_values", "_parent", "_span")

    def __init__(self, stage_id: str, values: Mapping[str, object] | None, parent: PassSpan | None) -> None:
        self._stage_id = stage_id
        self._values = values
        self._parent = parent
        self._span: trace.Span | None = None

    def __enter__(self) -> StageSpan:
        self._span = span = _start_child(self._stage_id, checked_values(self._stage_id, self._values), self._parent)
        return StageSpan(span, self._stage_id)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        span = self._span
        if span is None:
            return
        if exc is not None:
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()


def stage(stage_id: str, values: Mapping[str, object] | None = None, *, parent: PassSpan | None = None) -> _StageBlock:
    """A stage span around a block of work; the block's exceptions mark it as an error and propagate."""
    return _StageBlock(stage_id, values, parent)


def record_stage(
    stage_id: str,
    *,
    start_ns: int,
    end_ns: int,
    values: Mapping[str, object] | None = None,
    parent: PassSpan | None = None,
    status: SpanStatus = "ok",
) -> None:
    """Record a stage measured elsewhere (e.g. inside the engine loop) with explicit times."""
    attrs = checked_values(stage_id, values)
    sink = _state["sink"]
    if sink is not None:
        pctx = _parent_span_context(parent)
        ctx = light.child_context(sink, pctx)
        if ctx is not None:
            if pctx.trace_flags.sampled:
                span_status = _OK_STATUS if status == "ok" else Status(StatusCode.ERROR, status)
                sink.emit(light.finished(sink, stage_id, ctx, pctx, light.valid_attributes(attrs), start_ns,
                                         max(end_ns, start_ns), span_status))
            return
    span = _tracer().start_span(
        stage_id,
        context=parent.context if parent is not None else None,
        attributes=attrs,
        start_time=start_ns,
    )
    if status != "ok":
        span.set_status(Status(StatusCode.ERROR, status))
    span.end(end_time=max(end_ns, start_ns))


def mark_unobserved(stage_id: str, reason: str, *, parent: PassSpan | None = None) -> None:
    """Say a stage happened where we cannot see it (e.g. a hosted provider's forward pass)."""
    t = now_ns()
    record_stage(
        stage_id,
        start_ns=t,
        end_ns=t,
        values={N.OBSERVED: False, N.UNOBSERVED_REASON: reason},
        parent=parent,
    )


@contextmanager
def tool_span(
    name: str,
    call_id: str | None = None,
    *,
    scope: str = "read",
    parent: PassSpan | None = None,
    values: Mapping[str, object] | None = None,
) -> Iterator[StageSpan]:
    """An ``execute_tool {name}`` span carrying ``loop.tool_dispatch`` values; errors are recorded, then raised."""
    attrs = checked_values(
        S.LOOP_TOOL_DISPATCH,
        {N.GEN_AI_TOOL_NAME: name, N.GEN_AI_TOOL_CALL_ID: call_id, N.TOOL_SCOPE: scope, **(values or {})},
    )
    attrs[N.GEN_AI_OPERATION_NAME] = "execute_tool"
    span = _start_child(f"execute_tool {name}", attrs, parent)
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield StageSpan(span, S.LOOP_TOOL_DISPATCH)
    except BaseException as exc:
        # the message is the app's text (it often names what the call was asked: an order id, a path): kept only
        # under full capture; otherwise the error's type, and the helpers' result digest tells errors apart
        said = f"{type(exc).__name__}: {exc}" if capture.mode() == "full" else type(exc).__name__
        span.set_attribute(N.TOOL_ERROR, said)
        span.set_status(Status(StatusCode.ERROR, said))
        raise
    finally:
        otel_context.detach(token)
        span.end()
