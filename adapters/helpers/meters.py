"""Meters: a price table per model, cost per pass and per trace, cache hit rate, deploy markers.

Prices are USD per million tokens for five kinds of token: uncached input, cached input (cache reads),
5-minute and 1-hour cache writes, and output. A pass is priced by the user's JSON file (argument >
``LLMTRACE_PRICES``) for the models it names, else by ``genai-prices`` (the ``prices`` extra, see
``llmtrace.tracer.record.prices``, which holds the table the middleware prices every pass with),
else by the bundled table (``prices.json``, list prices at the time of writing). A model
none of them knows gets no cost at all rather than a guessed one.

The deploy on every span comes from ``llmtrace.init(deploy=...)`` (the ``service.version`` resource
attribute); ``mark_deploy`` adds the marker the cache-hit timeline shows.
"""

from __future__ import annotations

import os

from llmtrace.tracer import recording as rec
from llmtrace.tracer.record.prices import (
    NO_PRICE,
    PassPrice,
    Price,
    PriceTable,
    accounting_values,
    current_deploy,
    load_prices,
    pass_cost,
    price_pass,
    price_table,
    trace_costs,
)
from llmtrace.tracer.record.usage import Usage
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

__all__ = [
    "NO_PRICE", "PassPrice", "Price", "PriceTable", "Usage", "accounting_values", "cache_hit_rate",
    "current_deploy", "load_prices", "mark_deploy", "pass_cost", "price_pass", "price_table",
    "record_accounting", "trace_cost", "trace_costs",
]


def record_accounting(
    model: str | None, usage: Usage, parent: rec.PassSpan | None = None
) -> dict[str, object]:
    """App-side use: emit ``meters.cache_accounting`` for a pass whose usage the app holds; the cost
    also goes on the pass span and into the trace's running total."""
    values = accounting_values(model, usage)
    t = rec.now_ns()
    rec.record_stage(S.METERS_CACHE_ACCOUNTING, start_ns=t, end_ns=t, values=values, parent=parent)
    cost = values[N.METERS_COST_USD]
    if parent is not None and isinstance(cost, float):
        parent.set(N.METERS_COST_USD, cost)
        parent.set(N.METERS_TRACE_COST_USD, trace_costs.add(parent.trace_id, cost))
    return values


# ── reading the store (short read connections; never held open) ──────────────────────────────
def trace_cost(db: str | os.PathLike[str], trace_id: str) -> float:
    """Sum of pass costs of one trace in the store (client passes only, so nothing counts twice)."""
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(cost_usd), 0) FROM requests "
            "WHERE trace_id = ? AND side IN ('client', 'app')",
            [trace_id],
        ).fetchone()
    return float(row[0]) if row else 0.0


def cache_hit_rate(
    db: str | os.PathLike[str], deploy: str | None = None, side: str = "client"
) -> float | None:
    """Cached over all prompt tokens across passes (optionally of one deploy); None when nothing counted."""
    from llmtrace.tracer.storage.store import read_connection

    sql = (
        "SELECT sum(cached_tokens), sum(prompt_tokens) FROM requests "
        "WHERE side = ? AND prompt_tokens IS NOT NULL AND cached_tokens IS NOT NULL"
    )
    params: list[object] = [side]
    if deploy is not None:
        sql += " AND deploy = ?"
        params.append(deploy)
    with read_connection(db) as conn:
        row = conn.execute(sql, params).fetchone()
    if not row or not row[1]:
        return None
    return float(row[0]) / float(row[1])


def mark_deploy(
    db: str | os.PathLike[str], name: str, note: str | None = None, service: str | None = None
) -> None:
    """Add a deploy marker to the store (what ``llmtrace deploy mark`` does)."""
    from llmtrace.tracer.storage.store import mark_deploy as _mark

    _mark(db, name, note, service)
