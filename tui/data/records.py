"""Records the explorer's widgets get: frozen copies of store rows, never live connections or cursors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# one span record for every reader of a trace's spans (the report's trace pages too)
from llmtrace.tracer.storage.span_records import TOOL_OPERATION as TOOL_OPERATION
from llmtrace.tracer.storage.span_records import SpanRecord as SpanRecord


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One inference pass, as the ``requests`` view has it."""

    trace_id: str
    span_id: str
    start_ns: int
    side: str | None
    service: str | None
    model: str | None
    replica: str | None
    deploy: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    hit_ratio: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens: int | None
    finish_reason: str | None
    status: str | None
    cost_usd: float | None
    duration_ms: float | None


@dataclass(frozen=True, slots=True)
class RequestPage:
    """A window of the (filtered, sorted) request list: only what the table shows is ever read."""

    rows: tuple[RequestRow, ...]
    total: int
    offset: int
    store_passes: int  # passes in the whole store, to tell "empty store" from "filter matched nothing"


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """Every span of one trace, sorted by start time."""

    trace_id: str
    spans: tuple[SpanRecord, ...]
    # pass span id -> (phase, stage, exclusive ms) rows of the time_breakdown view
    breakdown: Mapping[str, tuple[tuple[str | None, str, float], ...]] = field(default_factory=dict)

    @property
    def start_ns(self) -> int:
        return min((s.start_ns for s in self.spans), default=0)

    @property
    def end_ns(self) -> int:
        return max((s.end_ns for s in self.spans), default=0)


@dataclass(frozen=True, slots=True)
class CacheBucket:
    """Prompt and cached tokens of the passes that started inside one time bucket."""

    start_ns: int
    end_ns: int
    passes: int
    prompt_tokens: int
    cached_tokens: int

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens > 0 else None


@dataclass(frozen=True, slots=True)
class DeployMark:
    name: str
    at_ns: int
    note: str | None


@dataclass(frozen=True, slots=True)
class DeployCost:
    """Per-deploy totals for the cache view's cost table."""

    deploy: str
    passes: int
    cost_per_request_usd: float | None
    hit_rate: float | None
    ttft_p50_ms: float | None
    prompt_tokens_mean: float | None


@dataclass(frozen=True, slots=True)
class CacheReport:
    buckets: tuple[CacheBucket, ...]
    deploys: tuple[DeployMark, ...]
    costs: tuple[DeployCost, ...]


@dataclass(frozen=True, slots=True)
class StoreStamp:
    """Cheap fingerprint of the store for live mode: when it changes, visible data is re-read."""

    passes: int
    latest_ns: int
    deploys: int
