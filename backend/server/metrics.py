"""``/metrics`` in the Prometheus text format: queue depth, running requests, pool use and prefix hit rate
per replica. A convenience for dashboards; the traces stay the source of truth."""

from __future__ import annotations

from typing import Any

from llmtrace.backend.server.service import GenerationService


def _line(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {value:g}"
    return f"{name} {value:g}"


def _num(stats: dict[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = stats.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def render(service: GenerationService) -> str:
    a = service.admission
    out = [
        "# HELP llmtrace_queue_depth Requests waiting for a running slot.",
        "# TYPE llmtrace_queue_depth gauge",
        _line("llmtrace_queue_depth", a.queued),
        "# HELP llmtrace_running Requests admitted and generating.",
        "# TYPE llmtrace_running gauge",
        _line("llmtrace_running", a.running),
        "# TYPE llmtrace_max_running gauge",
        _line("llmtrace_max_running", a.max_running),
        "# TYPE llmtrace_shed_total counter",
        _line("llmtrace_shed_total", a.shed_total),
        "# TYPE llmtrace_connections_reused_total counter",
        _line("llmtrace_connections_reused_total", service.connections.reused_total),
        "# TYPE llmtrace_requests_total counter",
    ]
    for key, count in sorted(service.counts.items()):
        endpoint, status = key.split(":", 1)
        out.append(_line("llmtrace_requests_total", count, {"endpoint": endpoint, "status": status}))
    out += ["# HELP llmtrace_pool_utilization Share of KV blocks in use.", "# TYPE llmtrace_pool_utilization gauge"]
    rates = []
    for r in service.replicas:
        try:
            stats = r.stats()
        except Exception:
            continue
        labels = {"replica": r.id}
        util = _num(stats, "pool_utilization", "utilization")
        if util is None:
            total, free = _num(stats, "num_blocks", "total_blocks"), _num(stats, "free_blocks", "num_free_blocks")
            if total and free is not None:
                util = 1.0 - free / total
        if util is not None:
            out.append(_line("llmtrace_pool_utilization", util, labels))
        hit = _num(stats, "prefix_hit_rate", "hit_rate")
        if hit is not None:
            rates.append(_line("llmtrace_prefix_hit_rate", hit, labels))
        out.append(_line("llmtrace_replica_in_flight", r.in_flight, labels))
    out += ["# HELP llmtrace_prefix_hit_rate Prompt tokens served from the prefix cache / tokens looked up.",
            "# TYPE llmtrace_prefix_hit_rate gauge", *rates]
    return "\n".join(out) + "\n"
