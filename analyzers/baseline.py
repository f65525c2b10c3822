"""The numbers ``llmtrace check`` compares: cache hit rate, TTFT p50/p95 and cost per request, for the
whole store, one deploy, or a baseline file written earlier by ``llmtrace check --save-baseline``."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from llmtrace.analyzers.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

BASELINE_VERSION = 1
TTFT_SAMPLE = 500  # TTFTs a baseline keeps: enough for a bootstrap bound on p50 and p95
SAMPLE = 500  # passes' token counts and costs a baseline keeps, for the same bounds on hit rate and cost
MIN_CPU_PASSES = 5  # prefill steps measured on fewer passes than this say nothing about the machine
_PREFILL_CPU = {"wall": (N.PREFILL_MS, "float"), "cpu": (N.PREFILL_CPU_MS, "float"),
                "wait": (N.PREFILL_CPU_WAIT_MS, "float")}


@dataclass(frozen=True, slots=True)
class Metrics:
    deploy: str | None  # None: every deploy in the window
    passes: int
    hit_rate: float | None  # cached prompt tokens over prompt tokens
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    cost_per_request_usd: float | None
    side: str | None = None  # kept so older baseline files load; the numbers come from the passes view
    # the passes' TTFTs (newest first, at most TTFT_SAMPLE), so a TTFT check can tell a rise from noise
    ttft_sample: tuple[float, ...] = ()
    # over the prefill steps of the passes our server ran (forward.prefill): the engine thread's CPU time per
    # pass (median: the work, which a busier machine leaves about as it was), and the share of those steps'
    # wall time it waited for a CPU (the machine's other load). None when too few passes recorded them
    # (hosted providers, foreign servers, older stores and baselines). With them a TTFT check can tell a
    # busier machine from a slower deploy.
    prefill_cpu_ms: float | None = None
    prefill_wait_share: float | None = None
    # the passes' (cached, prompt) tokens and costs (newest first, at most SAMPLE each), so the hit rate and
    # cost checks can tell a change from the few passes a small run has (its cold first call weighs more)
    hit_sample: tuple[tuple[float, float], ...] = ()
    cost_sample: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"version": BASELINE_VERSION, **asdict(self),
                "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Metrics:
        if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION:
            raise ValueError("not an llmtrace baseline (expected version 1; write one with --save-baseline)")

        def num(key: str) -> float | None:
            v = data.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"baseline field {key} must be a number, got {v!r}")
            return float(v)

        passes, deploy, side = data.get("passes", 0), data.get("deploy"), data.get("side")
        raw = data.get("ttft_sample")
        sample = tuple(float(v) for v in raw if isinstance(v, (int, float)) and not isinstance(v, bool)) \
            if isinstance(raw, list) else ()
        pairs = data.get("hit_sample")
        hits = tuple((float(p[0]), float(p[1])) for p in pairs if isinstance(p, list) and len(p) == 2
                     and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)) \
            if isinstance(pairs, list) else ()
        raw_cost = data.get("cost_sample")
        costs = tuple(float(v) for v in raw_cost if isinstance(v, (int, float)) and not isinstance(v, bool)) \
            if isinstance(raw_cost, list) else ()
        return cls(deploy=deploy if isinstance(deploy, str) else None,
                   passes=int(passes) if isinstance(passes, int) else 0, hit_rate=num("hit_rate"),
                   ttft_p50_ms=num("ttft_p50_ms"), ttft_p95_ms=num("ttft_p95_ms"),
                   cost_per_request_usd=num("cost_per_request_usd"),
                   side=side if isinstance(side, str) else None, ttft_sample=sample,
                   prefill_cpu_ms=num("prefill_cpu_ms"), prefill_wait_share=num("prefill_wait_share"),
                   hit_sample=hits, cost_sample=costs)


def load_baseline(path: str | os.PathLike[str]) -> Metrics:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"baseline {path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    return Metrics.from_dict(data)


def save_baseline(path: str | os.PathLike[str], metrics: Metrics) -> None:
    Path(path).write_text(json.dumps(metrics.to_dict(), indent=2) + "\n", encoding="utf-8")


def latest_deploy(q: Query) -> str | None:
    row = q.one(f"SELECT deploy FROM {q.passes} WHERE deploy IS NOT NULL ORDER BY start_ns DESC LIMIT 1")
    return str(row["deploy"]) if row else None


def deploys(q: Query) -> list[str]:
    return [str(r["deploy"]) for r in q.rows(
        f"SELECT deploy, min(start_ns) AS first FROM {q.passes} WHERE deploy IS NOT NULL GROUP BY deploy ORDER BY first")]


def measure(q: Query, deploy: str | None = None, side: str | None = None) -> Metrics:
    """Metrics over the window's logical passes (the ``passes`` view: one row per pass, the server's token
    counts where it reported them, the app's otherwise), for one deploy when given. ``side`` is ignored
    (baselines written before the view carry one). The hit rate counts only passes whose cached tokens were
    reported: none reported (openai-v2 records none) is no hit rate, not 0%."""
    dep = "" if deploy is None else " WHERE deploy = ?"
    params = [] if deploy is None else [deploy]
    row = q.one(f"""
        SELECT count(*) AS passes,
               sum(least(cached_tokens, prompt_tokens)) FILTER (WHERE prompt_tokens > 0 AND cached_tokens IS NOT NULL)
                 / nullif(sum(prompt_tokens) FILTER (WHERE prompt_tokens > 0 AND cached_tokens IS NOT NULL), 0)
                 AS hit_rate,
               quantile_cont(ttft_ms, 0.5) AS p50, quantile_cont(ttft_ms, 0.95) AS p95,
               avg(cost_usd) AS cost
        FROM {q.passes}{dep}""", params)
    sample = q.rows(f"SELECT round(ttft_ms, 2) AS t FROM {q.passes}{dep}{' AND' if dep else ' WHERE'} "
                    f"ttft_ms IS NOT NULL ORDER BY start_ns DESC LIMIT {TTFT_SAMPLE}", params)
    newest = q.rows(f"SELECT least(cached_tokens, prompt_tokens) AS c, prompt_tokens AS p, cost_usd AS usd "
                    f"FROM {q.passes}{dep} ORDER BY start_ns DESC LIMIT {SAMPLE}", params)
    cpu_ms, wait_share = _prefill_cpu(q, deploy)
    return Metrics(deploy=deploy, passes=int(row.get("passes") or 0),
                   hit_rate=_f(row.get("hit_rate")), ttft_p50_ms=_f(row.get("p50")), ttft_p95_ms=_f(row.get("p95")),
                   cost_per_request_usd=_f(row.get("cost")), side=None,
                   ttft_sample=tuple(float(r["t"]) for r in sample),
                   prefill_cpu_ms=cpu_ms, prefill_wait_share=wait_share,
                   hit_sample=tuple((float(r["c"]), float(r["p"])) for r in newest
                                    if r["c"] is not None and r["p"] is not None and r["p"] > 0),
                   cost_sample=tuple(float(r["usd"]) for r in newest if r["usd"] is not None))


def _prefill_cpu(q: Query, deploy: str | None) -> tuple[float | None, float | None]:
    """(median CPU ms per pass, wait share) of the engine thread over the prefill steps of the window's (or
    deploy's) passes that our server ran, each None with fewer than MIN_CPU_PASSES passes measured (the wait
    is Linux only)."""
    dep = "" if deploy is None else " AND p.deploy = ?"
    row = q.one(f"""
        SELECT count(*) FILTER (WHERE f.cpu IS NOT NULL) AS n_cpu,
               median(f.cpu) AS cpu_ms,
               count(*) FILTER (WHERE f.wait IS NOT NULL) AS n_wait,
               sum(f.wait) FILTER (WHERE f.wait IS NOT NULL) / nullif(sum(f.wall) FILTER (WHERE f.wait IS NOT NULL), 0)
                 AS wait_share
        FROM {q.passes} p JOIN {q.stage_sql(S.FORWARD_PREFILL, _PREFILL_CPU)} f ON f.parent_span_id = p.server_span_id
        WHERE f.wall > 0{dep}""", [] if deploy is None else [deploy])
    cpu = _f(row.get("cpu_ms")) if int(row.get("n_cpu") or 0) >= MIN_CPU_PASSES else None
    wait = _f(row.get("wait_share")) if int(row.get("n_wait") or 0) >= MIN_CPU_PASSES else None
    return cpu, wait


def _f(v: float | None) -> float | None:
    return None if v is None else float(v)
