"""``llmtrace.init`` / ``llmtrace.shutdown``: one TracerProvider with the store exporter and, when asked
(or when the standard OTEL_EXPORTER_OTLP_* variables are set), the OTLP exporter — both at once is fine."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from llmtrace.tracer.record import capture as capture_mode
from llmtrace.tracer.record import health, recording
from llmtrace.tracer.record.light_span import Sink
from llmtrace.tracer.record.processor import QueueingSpanProcessor
from llmtrace.tracer.record.runtime import runtime
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.settings import Settings

log = logging.getLogger("llmtrace")


@dataclass(slots=True)
class Tracing:
    """The set-up ``init`` made, held by the process's ``runtime`` (runtime.py); ``clear()`` shuts it down."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    provider: TracerProvider | None = None
    settings: Settings | None = None
    processors: list[QueueingSpanProcessor] = field(default_factory=list)
    dropped_before: int = 0  # health's dropped_spans when the current set-up began
    atexit_registered: bool = False
    # in-process memory that belongs to one set-up (the middleware's conversations): forgotten at each init,
    # so calls traced into one store never continue conversations, or compare facts, with calls traced into
    # another. Wiring, not state: clear() keeps them.
    reset_hooks: list[Callable[[], None]] = field(default_factory=list)

    def clear(self) -> None:
        with self.lock:
            _shutdown_locked(self)
            self.settings = None


_tracing = runtime.attach("tracing", Tracing())


def on_init(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever ``init`` sets tracing up anew."""
    if hook not in _tracing.reset_hooks:
        _tracing.reset_hooks.append(hook)


def init(
    db: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
    service_name: str | None = None,
    deploy: str | None = None,
    capture: str | None = None,
    *,
    max_db_bytes: int | None = None,
    exporters: list[SpanExporter] | None = None,
    strict: bool | None = None,
    set_global: bool = False,
    shutdown_timeout_s: float | None = None,
) -> TracerProvider:
    """Set up tracing. Arguments win over environment variables (LLMTRACE_DB, LLMTRACE_CAPTURE,
    LLMTRACE_DEPLOY, LLMTRACE_SHUTDOWN_TIMEOUT_S, OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_ENDPOINT), which win
    over defaults. ``db="none"`` disables the store. Calling ``init`` again replaces the previous set-up.
    ``shutdown_timeout_s`` (default 5) bounds ``shutdown()`` and interpreter exit: spans not stored by
    then are dropped, counted, and reported in one warning line."""
    t = _tracing
    settings = Settings.resolve(db, otlp_endpoint, service_name, deploy, capture, strict, shutdown_timeout_s)
    with t.lock:
        if t.provider is not None:
            _shutdown_locked(t)
        for hook in t.reset_hooks:
            hook()
        attrs: dict[str, str] = {sc.SERVICE_NAME: settings.service_name}
        if settings.deploy:
            attrs[N.SERVICE_VERSION] = settings.deploy
        # Only our exit hook, with one deadline for all processors (after a re-init the SDK's would run first).
        provider = TracerProvider(resource=Resource.create(attrs), shutdown_on_exit=False)
        processors: list[QueueingSpanProcessor] = []
        timeout = settings.shutdown_timeout_s
        if settings.db is not None:
            # imported here: the store's writer brings duckdb and pyarrow, which an app importing llmtrace
            # need not load before it calls init()
            from llmtrace.tracer.record.exporter import DuckDBSpanExporter

            processors.append(QueueingSpanProcessor(DuckDBSpanExporter(settings.db, max_bytes=max_db_bytes),
                                                    shutdown_timeout_s=timeout))
        if settings.otlp_endpoint:
            processors.append(QueueingSpanProcessor(_otlp_exporter(settings.otlp_endpoint), name="otlp",
                                                    batch_size=512, interval_s=1.0, shutdown_timeout_s=timeout))
        for exporter in exporters or []:
            processors.append(QueueingSpanProcessor(exporter, name=type(exporter).__name__,
                                                    shutdown_timeout_s=timeout))
        for p in processors:
            provider.add_span_processor(p)
        t.processors[:] = processors
        t.dropped_before = health.counters().get("dropped_spans", 0)
        capture_mode.set_mode(settings.capture)
        capture_mode.use_store_key(settings.db)  # hashes keyed with the store's secret (<store>.key)
        # Stage spans skip the SDK's per-span work and go straight to these processors (light_span.py).
        recording.configure(provider.get_tracer("llmtrace"), strict=settings.strict,
                            sink=Sink.for_provider(provider, processors))
        if set_global:
            trace.set_tracer_provider(provider)
        t.provider, t.settings = provider, settings
        if not t.atexit_registered:
            atexit.register(shutdown)
            t.atexit_registered = True
    return provider


def _otlp_exporter(endpoint: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = endpoint.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint, timeout=5)


def _shutdown_locked(t: Tracing) -> None:
    provider = t.provider
    if provider is None:
        return
    recording.configure(None)  # spans recorded from now on go nowhere instead of into a closing queue
    settings = t.settings
    timeout = settings.shutdown_timeout_s if settings is not None else 5.0
    deadline = time.monotonic() + timeout
    for p in t.processors:  # one deadline for all of them: the processors shut down one after the other
        p.set_deadline(deadline)
    try:
        provider.shutdown()
    except Exception as exc:  # the tracer never raises into the app, least of all at exit
        log.warning("llmtrace: shutdown failed: %r", exc)
    finally:
        t.provider = None
        t.processors.clear()
    dropped = health.counters().get("dropped_spans", 0) - t.dropped_before
    if dropped > 0:
        where = f" in {settings.db}" if settings is not None and settings.db is not None else ""
        log.warning("llmtrace: %d spans could not be stored%s and were dropped (store locked by another "
                    "process, unwritable or full, or not written within shutdown_timeout_s=%gs)",
                    dropped, where, timeout)


def shutdown() -> None:
    """Flush every exporter and stop, within ``shutdown_timeout_s``. Runs at interpreter exit too, so a
    short script loses no span; the export threads have ended when it returns."""
    with _tracing.lock:
        _shutdown_locked(_tracing)


def force_flush(timeout_millis: int = 30000) -> bool:
    p = _tracing.provider
    return p.force_flush(timeout_millis) if p is not None else True


def current_settings() -> Settings | None:
    return _tracing.settings
