"""The numbers ``llmtrace check`` compares: cache hit rate, TTFT p50/p95 and cost per request, for the
whole store, one deploy, or a baseline file written earlier by ``llmtrace check --save-baseline``."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from llmtrace.analyzers.core.billing import BILLED_SQL
from llmtrace.analyzers.core.query import Query, attr
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.views import capped_cached_sql, hit_rate_sql

BASELINE_VERSION = 1
TTFT_SAMPLE = 500  # TTFTs a baseline keeps: enough for a bootstrap bound on p50 and p95
SAMPLE = 500  # passes' token counts and costs a baseline keeps, for the same bounds on hit rate and cost
MIN_CPU_PASSES = 5  # prefill steps measured on fewer passes than this say nothing about the machine
_PREFILL_CPU = {"wall": N.PREFILL_MS, "cpu": N.PREFILL_CPU_MS,
                "wait": N.PREFILL_CPU_WAIT_MS}


class PrefillPass(NamedTuple):
    """One pass our server ran, as a TTFT check reads it (check_cli.busier_passes): its TTFT, its prefill steps' wall
    time, the engine thread's own CPU time there and its wait for a CPU (ms), the prompt tokens it
    prefilled (uncached), and whether it shared the engine (waited for a running slot, or ran in a batch
    with another pass: a scheduler's queue) — 1.0 — or had it to itself — 0.0."""

    ttft_ms: float
    wall_ms: float
    cpu_ms: float
    wait_ms: float
    tokens: float
    shared: float


_Row = TypeVar("_Row")


class WaitedPass(NamedTuple):
    """One pass's TTFT and the part of it that the threads its first token waited on were ready to run but
    waited for a CPU (``llmtrace.ttft.cpu_wait_ms`` of the side whose TTFT the passes view shows: our server's
    event loop and engine threads, or the app's calling thread): the part a busier machine adds."""

    ttft_ms: float
    wait_ms: float


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
    # the same readings pass by pass (newest first, at most SAMPLE), so a TTFT check can read the passes that
    # set a quantile (the slowest, for p95): did they wait for a CPU, prefill more, or queue behind other
    # passes. Empty where the server recorded no wait and in baseline files written before them.
    prefill_sample: tuple[PrefillPass, ...] = ()
    # billed tokens per request (prompt tokens, and answer tokens at OUTPUT_WEIGHT each) and their sample: what
    # `check --cost` compares where no price is known (a self-hosted model costs $0 on every side)
    billed_tokens_per_request: float | None = None
    billed_sample: tuple[float, ...] = ()
    # the passes' TTFTs with their wait for a CPU (newest first, at most SAMPLE): a TTFT check nets the wait
    # out to tell a busier machine from a slower deploy. Empty where no side recorded it (not Linux, foreign
    # servers, baselines written before it).
    ttft_wait_sample: tuple[WaitedPass, ...] = ()

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
        raw_billed = data.get("billed_sample")
        billed = tuple(float(v) for v in raw_billed if isinstance(v, (int, float)) and not isinstance(v, bool)) \
            if isinstance(raw_billed, list) else ()
        readings = _rows(data.get("prefill_sample"), PrefillPass, len(PrefillPass._fields))
        waited = _rows(data.get("ttft_wait_sample"), WaitedPass, len(WaitedPass._fields))
        return cls(deploy=deploy if isinstance(deploy, str) else None,
                   passes=int(passes) if isinstance(passes, int) else 0, hit_rate=num("hit_rate"),
                   ttft_p50_ms=num("ttft_p50_ms"), ttft_p95_ms=num("ttft_p95_ms"),
                   cost_per_request_usd=num("cost_per_request_usd"),
                   side=side if isinstance(side, str) else None, ttft_sample=sample,
                   prefill_cpu_ms=num("prefill_cpu_ms"), prefill_wait_share=num("prefill_wait_share"),
                   hit_sample=hits, cost_sample=costs, prefill_sample=readings,
                   billed_tokens_per_request=num("billed_tokens_per_request"), billed_sample=billed,
                   ttft_wait_sample=waited)


def _rows(raw: object, kind: Callable[..., _Row], width: int) -> tuple[_Row, ...]:
    """A baseline file's list of per-pass readings as ``kind`` records of ``width`` numbers; rows of another width
    or with a value that is not a number are dropped (a file written by another version)."""
    if not isinstance(raw, list):
        return ()
    return tuple(kind(*(float(v) for v in p)) for p in raw
                 if isinstance(p, list) and len(p) == width
                 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p))


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
               {hit_rate_sql()} AS hit_rate,
               quantile_cont(ttft_ms, 0.5) AS p50, quantile_cont(ttft_ms, 0.95) AS p95,
               avg(cost_usd) AS cost, avg({BILLED_SQL}) FILTER (WHERE prompt_tokens > 0) AS billed
        FROM {q.passes}{dep}""", params)
    sample = q.rows(f"SELECT round(ttft_ms, 2) AS t FROM {q.passes}{dep}{' AND' if dep else ' WHERE'} "
                    f"ttft_ms IS NOT NULL ORDER BY start_ns DESC LIMIT {TTFT_SAMPLE}", params)
    newest = q.rows(f"SELECT {capped_cached_sql()} AS c, prompt_tokens AS p, cost_usd AS usd, {BILLED_SQL} AS b "
                    f"FROM {q.passes}{dep} ORDER BY start_ns DESC LIMIT {SAMPLE}", params)
    cpu_ms, wait_share = _prefill_cpu(q, deploy)
    return Metrics(deploy=deploy, passes=int(row.get("passes") or 0),
                   hit_rate=_f(row.get("hit_rate")), ttft_p50_ms=_f(row.get("p50")), ttft_p95_ms=_f(row.get("p95")),
                   cost_per_request_usd=_f(row.get("cost")), side=None,
                   ttft_sample=tuple(float(r["t"]) for r in sample),
                   prefill_cpu_ms=cpu_ms, prefill_wait_share=wait_share,
                   hit_sample=tuple((float(r["c"]), float(r["p"])) for r in newest
                                    if r["c"] is not None and r["p"] is not None and r["p"] > 0),
                   cost_sample=tuple(float(r["usd"]) for r in newest if r["usd"] is not None),
                   prefill_sample=_prefill_passes(q, deploy), billed_tokens_per_request=_f(row.get("billed")),
                   billed_sample=tuple(float(r["b"]) for r in newest if r["b"] is not None and r["p"]),
                   ttft_wait_sample=_waited_passes(q, deploy))


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


_PASS_PREFILL = {**_PREFILL_CPU, "tokens": N.PREFILL_TOKENS}
_PASS_BATCH = {"batch": N.BATCH_SIZE_MAX}


def _prefill_passes(q: Query, deploy: str | None) -> tuple[PrefillPass, ...]:
    """The newest SAMPLE passes our server ran with a known wait for a CPU, one PrefillPass each (newest
    first); empty with fewer than MIN_CPU_PASSES. Their prefill and batching stage spans are read in one
    scan of the store (the spans of the picked passes only)."""
    dep = "" if deploy is None else " AND deploy = ?"
    only = "AND parent_span_id IN (SELECT server_span_id FROM pick)"
    src = None if q.exported else "picked"
    picked = "" if src is None else \
        f"picked AS MATERIALIZED {q.stage_spans_sql([S.FORWARD_PREFILL, S.FORWARD_BATCHING], only)},"
    rows = q.rows(f"""
        WITH pick AS (SELECT server_span_id, ttft_ms, queue_wait_ms, start_ns FROM {q.passes}
                      WHERE server_span_id IS NOT NULL AND ttft_ms IS NOT NULL{dep}
                      ORDER BY start_ns DESC LIMIT {SAMPLE}),
             {picked}
             f AS (SELECT parent_span_id, sum(wall) AS wall, sum(cpu) AS cpu, sum(wait) AS wait,
                          sum(tokens) AS tokens, count(wait) AS n_wait, count(*) AS n
                   FROM {q.stage_sql(S.FORWARD_PREFILL, _PASS_PREFILL, only, src)} GROUP BY parent_span_id),
             b AS (SELECT parent_span_id, max(batch) AS batch
                   FROM {q.stage_sql(S.FORWARD_BATCHING, _PASS_BATCH, only, src)} GROUP BY parent_span_id)
        SELECT pick.ttft_ms AS t, f.wall AS wall, f.cpu AS cpu, f.wait AS wait, coalesce(f.tokens, 0) AS tokens,
               CASE WHEN coalesce(pick.queue_wait_ms, 0) > 0 OR coalesce(b.batch, 1) > 1 THEN 1 ELSE 0 END AS shared
        FROM pick JOIN f ON f.parent_span_id = pick.server_span_id
        LEFT JOIN b ON b.parent_span_id = pick.server_span_id
        WHERE f.wall > 0 AND f.cpu IS NOT NULL AND f.n_wait = f.n
        ORDER BY pick.start_ns DESC""", [] if deploy is None else [deploy])
    out = tuple(PrefillPass(round(float(r["t"]), 2), round(float(r["wall"]), 3), round(float(r["cpu"]), 3),
                            round(float(r["wait"]), 3), float(r["tokens"]), float(r["shared"])) for r in rows)
    return out if len(out) >= MIN_CPU_PASSES else ()


def _waited_passes(q: Query, deploy: str | None) -> tuple[WaitedPass, ...]:
    """The newest SAMPLE passes with a TTFT and its wait for a CPU, from the side the TTFT is read from (the
    passes view prefers our server's); empty with fewer than MIN_CPU_PASSES."""
    dep = "" if deploy is None else " AND deploy = ?"
    rows = q.rows(f"""
        WITH pick AS (SELECT coalesce(server_span_id, client_span_id) AS span_id, ttft_ms, start_ns FROM {q.passes}
                      WHERE ttft_ms IS NOT NULL{dep} ORDER BY start_ns DESC LIMIT {SAMPLE})
        SELECT pick.ttft_ms AS t, {attr(N.TTFT_CPU_WAIT_MS, column='s.attributes')} AS w
        FROM pick JOIN {q.spans} s ON s.span_id = pick.span_id
        ORDER BY pick.start_ns DESC""", [] if deploy is None else [deploy])
    out = tuple(WaitedPass(round(float(r["t"]), 3), round(min(float(r["w"]), float(r["t"])), 3))
                for r in rows if r["w"] is not None and r["t"] is not None)
    return out if len(out) >= MIN_CPU_PASSES else ()


def _f(v: float | None) -> float | None:
    return None if v is None else float(v)
