"""``llmtrace.init`` / ``llmtrace.shutdown``: one TracerProvider with the store exporter and, when asked
(or when the standard OTEL_EXPORTER_OTLP_* variables are set), the OTLP exporter — both at once is fine."""

from __future__ import annotations

import atexit
import os
import threading

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from . import capture as capture_mode
from . import recording
from .exporter import DuckDBSpanExporter
from .processor import QueueingSpanProcessor
from .settings import Settings

_lock = threading.Lock()
_provider: TracerProvider | None = None
_settings: Settings | None = None
_atexit_registered = False


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
) -> TracerProvider:
    """Set up tracing. Arguments win over environment variables (LLMTRACE_DB, LLMTRACE_CAPTURE,
    LLMTRACE_DEPLOY, OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_ENDPOINT), which win over defaults.
    ``db="none"`` disables the store. Calling ``init`` again replaces the previous set-up."""
    global _provider, _settings, _atexit_registered
    settings = Settings.resolve(db, otlp_endpoint, service_name, deploy, capture, strict)
    with _lock:
        if _provider is not None:
            _shutdown_locked()
        attrs: dict[str, str] = {"service.name": settings.service_name}
        if settings.deploy:
            attrs["service.version"] = settings.deploy
        provider = TracerProvider(resource=Resource.create(attrs))
        processors: list[SpanProcessor] = []
        if settings.db is not None:
            processors.append(QueueingSpanProcessor(DuckDBSpanExporter(settings.db, max_bytes=max_db_bytes)))
        if settings.otlp_endpoint:
            processors.append(QueueingSpanProcessor(_otlp_exporter(settings.otlp_endpoint), name="otlp",
                                                    batch_size=512, interval_s=1.0))
        for exporter in exporters or []:
            processors.append(QueueingSpanProcessor(exporter, name=type(exporter).__name__))
        for p in processors:
            provider.add_span_processor(p)
        capture_mode.set_mode(settings.capture)
        recording.configure(provider.get_tracer("llmtrace"), strict=settings.strict)
        if set_global:
            trace.set_tracer_provider(provider)
        _provider, _settings = provider, settings
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
    return provider


def _otlp_exporter(endpoint: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = endpoint.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint, timeout=5)


def _shutdown_locked() -> None:
    global _provider
    if _provider is not None:
        try:
            _provider.shutdown()
        finally:
            _provider = None
            recording.configure(None)


def shutdown() -> None:
    """Flush every exporter and stop. Runs at interpreter exit too, so a short script loses no span."""
    with _lock:
        _shutdown_locked()


def force_flush(timeout_millis: int = 30000) -> bool:
    p = _provider
    return p.force_flush(timeout_millis) if p is not None else True


def current_settings() -> Settings | None:
    return _settings
