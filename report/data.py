"""Every read the report makes, in one place, so that it can move onto the ``passes``, ``time_breakdown`` and
``ttft_breakdown`` views as they land (DESIGN.md, second wave) without touching the page or the charts.

A pass is a *logical* pass, as the analyzers count them: the ``passes`` view (client and server joined,
the trace's deploy, the server's value where it reports one), materialized once by the analyzers' ``Query``
over the selection (``--since``, ``--service``) and shared with them. The time views (``time_breakdown``,
``ttft_breakdown``) are used where the store has them, with a fallback on span durations for older stores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb

from llmtrace.analyzers.core.query import Query, Row, attr
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.stages import SELF_MS  # each stage's own time (issue 18)
from llmtrace.tracer.storage.fetch import first_row, scalar
from llmtrace.tracer.storage.span_records import SPAN_RECORD_COLUMNS, SpanRecord, span_record
from llmtrace.tracer.storage.time_views import WHOLE_CALL_TITLE
from llmtrace.tracer.storage.views import PASS_OPERATIONS, capped_cached_sql, hit_rate_sql

PASSES = "_llmtrace_report_passes"
SAMPLE = "_llmtrace_report_sample"
SAMPLE_SPANS = "_llmtrace_report_sample_spans"
SAMPLE_PER_DEPLOY = 1000
MAX_TRACE_SPANS = 2000
HOUR_NS = 3_600_000_000_000
REPLAY_BLOCK_VISITS = 30_000  # how much of the block-chain history the pool replay reads (newest first)


@dataclass(frozen=True, slots=True)
class Selection:
    since_ns: int | None = None
    service: str | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    passes: int
    traces: int
    first_ns: int | None
    last_ns: int | None
    deploys: tuple[str, ...]
    services: tuple[str, ...]
    models: tuple[str, ...]
    prompt_text_stored: bool


Span = SpanRecord  # one span record for the report and the explorer (tracer/storage/span_records.py)


class ReportData:
    """The report's reads over one connection. ``open()`` applies the selection and builds the logical passes
    once; every other method reads them. ``close()`` drops the temporary tables."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, selection: Selection | None = None) -> None:
        self.conn = conn
        self.sel = selection or Selection()
        self.query = Query(conn, self.sel.since_ns, self.sel.service)
        self._sample_made = False

    # ── setup ────────────────────────────────────────────────────────────────────────────────────
    def open(self) -> ReportData:
        self.conn.execute("SET enable_progress_bar = false")
        self.query.shareable()  # (asked first: the analyzers may then run in threads, analyzers/core/concurrent_run.py)
        self.query.materialize()  # the logical passes of the selection, which the analyzers of this run share
        self.conn.execute(f"""
            CREATE OR REPLACE TEMP TABLE {PASSES} AS
            SELECT trace_id, span_id, client_span_id, server_span_id, service, coalesce(deploy, '(none)') AS deploy,
                   start_ns, coalesce(response_model, model, '(unknown)') AS model, replica, prompt_tokens,
                   {capped_cached_sql()} AS cached_tokens, ttft_ms, tpot_ms, output_tokens,
                   finish_reason, cost_usd, status
            FROM {self.query.passes}""")
        return self

    def close(self) -> None:
        try:
            self.conn.execute(f"DROP TABLE IF EXISTS {PASSES}")
            self.conn.execute(f"DROP TABLE IF EXISTS {SAMPLE}")
            self.conn.execute(f"DROP TABLE IF EXISTS {SAMPLE_SPANS}")
        finally:
            self.query.release()

    def rows(self, sql: str, params: Sequence[object] | None = None) -> list[Row]:
        return self.query.rows(sql, params)

    def _has_view(self, name: str) -> bool:
        return bool(scalar(self.conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name])))

    # ── overview ─────────────────────────────────────────────────────────────────────────────────
    def summary(self) -> Summary:
        row = self.query.one(f"""SELECT count(*) AS n, count(DISTINCT trace_id) AS t, min(start_ns) AS lo,
                                        max(start_ns) AS hi FROM {PASSES}""")
        deploys = tuple(r["deploy"] for r in self.rows(
            f"SELECT deploy FROM {PASSES} GROUP BY deploy ORDER BY min(start_ns)"))
        services = tuple(str(r["service"]) for r in self.rows(
            f"SELECT DISTINCT service FROM {self.query.spans} WHERE service IS NOT NULL ORDER BY 1 LIMIT 20"))
        models = tuple(str(r["model"]) for r in self.rows(f"SELECT DISTINCT model FROM {PASSES} ORDER BY 1 LIMIT 20"))
        # Whether any pass kept its text (capture="full"): a property of how the app was set up, so the sampled
        # traces answer it without parsing every pass span of a big store.
        text = self.query.one(f"""SELECT count(*) AS n FROM (SELECT 1 FROM {self._sampled_spans()}
            WHERE operation IN {PASS_OPERATIONS} AND json_exists(attributes, '$."{N.PROMPT_TEXT}"') LIMIT 1)""")
        return Summary(int(row.get("n") or 0), int(row.get("t") or 0), _int(row.get("lo")), _int(row.get("hi")),
                       tuple(str(d) for d in deploys), services, models, bool(text.get("n")))

    def hit_rate_timeline(self, buckets: int = 48) -> list[Row]:
        """Cache hit rate (cached over prompt tokens) per time bucket and deploy."""
        lo_hi = self.query.one(f"SELECT min(start_ns) AS lo, max(start_ns) AS hi FROM {PASSES} WHERE prompt_tokens > 0")
        if lo_hi.get("lo") is None:
            return []
        lo, hi = int(lo_hi["lo"]), int(lo_hi["hi"])
        width = max(1, -(-(hi - lo + 1) // buckets))
        return self.rows(f"""
            SELECT {lo} + ((start_ns - {lo}) // {width}) * {width} + {width // 2} AS t_ns, deploy, count(*) AS passes,
                   {hit_rate_sql()} AS hit_rate
            FROM {PASSES} WHERE prompt_tokens > 0 GROUP BY 1, 2 ORDER BY 1, 2""")

    def deploy_marks(self) -> list[Row]:
        """Deploys marked with ``llmtrace deploy mark`` inside the window, and, for a deploy nobody marked,
        where its first pass appeared."""
        lo_hi = self.query.one(f"SELECT min(start_ns) AS lo, max(start_ns) AS hi FROM {PASSES}")
        if lo_hi.get("lo") is None:
            return []
        svc = "" if self.sel.service is None else " AND (service IS NULL OR service = ?)"
        marks = self.rows(f"""SELECT name AS deploy, at_ns, coalesce(note, '') AS note FROM deploys
            WHERE at_ns BETWEEN ? AND ?{svc} ORDER BY at_ns""",
                          [lo_hi["lo"], lo_hi["hi"], *([self.sel.service] if self.sel.service else [])])
        named = {m["deploy"] for m in marks}
        first = self.rows(f"SELECT deploy, min(start_ns) AS at_ns FROM {PASSES} WHERE deploy <> '(none)' "
                          "GROUP BY deploy ORDER BY 2")
        marks += [{"deploy": f["deploy"], "at_ns": f["at_ns"], "note": "first pass"} for f in first[1:]
                  if f["deploy"] not in named]
        return sorted(marks, key=lambda m: int(m["at_ns"]))

    def by_deploy(self) -> list[Row]:
        return self.rows(f"""
            SELECT deploy, count(*) AS passes,
                   {hit_rate_sql()} AS hit_rate,
                   quantile_cont(ttft_ms, 0.5) AS ttft_p50_ms, quantile_cont(ttft_ms, 0.95) AS ttft_p95_ms,
                   quantile_cont(tpot_ms, 0.5) AS tpot_p50_ms, avg(cost_usd) * 1000 AS cost_per_1k_usd,
                   avg(coalesce(cached_tokens, 0)) AS cached_per_call, avg(prompt_tokens - coalesce(cached_tokens, 0))
                     AS uncached_per_call, avg(output_tokens) AS output_per_call, min(start_ns) AS first_ns
            FROM {PASSES} GROUP BY deploy ORDER BY first_ns""")

    def latency_quantiles(self, column: str) -> list[Row]:
        """p5/p25/p50/p75/p95 of ``column`` (ttft_ms or tpot_ms) per model and deploy."""
        if column not in ("ttft_ms", "tpot_ms"):
            raise ValueError(f"not a latency column: {column}")
        qs = ", ".join(f"quantile_cont({column}, {q}) AS p{int(q * 100)}" for q in (0.05, 0.25, 0.5, 0.75, 0.95))
        return self.rows(f"""SELECT model, deploy, count({column}) AS n, {qs}, min(start_ns) AS first_ns
            FROM {PASSES} WHERE {column} IS NOT NULL GROUP BY model, deploy ORDER BY first_ns, model""")

    # ── cost ─────────────────────────────────────────────────────────────────────────────────────
    def cost_sums(self) -> list[Row]:
        """Per model and deploy: the token sums and the sums the price fit needs (see ``costs.fit_prices``)."""
        return self.rows(f"""
            SELECT model, deploy, count(*) AS passes, count(cost_usd) AS costed, sum(cost_usd) AS cost,
                   sum(u) AS u, sum(c) AS c, sum(o) AS o,
                   sum(u * u) FILTER (WHERE cost_usd IS NOT NULL) AS uu, sum(u * c) FILTER (WHERE cost_usd IS NOT NULL) AS uc,
                   sum(u * o) FILTER (WHERE cost_usd IS NOT NULL) AS uo, sum(c * c) FILTER (WHERE cost_usd IS NOT NULL) AS cc,
                   sum(c * o) FILTER (WHERE cost_usd IS NOT NULL) AS co, sum(o * o) FILTER (WHERE cost_usd IS NOT NULL) AS oo,
                   sum(u * cost_usd) AS uy, sum(c * cost_usd) AS cy, sum(o * cost_usd) AS oy,
                   sum(cost_usd * cost_usd) AS yy, min(start_ns) AS first_ns
            FROM (SELECT model, deploy, start_ns, cost_usd,
                         (coalesce(prompt_tokens, 0) - coalesce(cached_tokens, 0))::DOUBLE AS u,
                         coalesce(cached_tokens, 0)::DOUBLE AS c, coalesce(output_tokens, 0)::DOUBLE AS o FROM {PASSES})
            GROUP BY model, deploy ORDER BY first_ns""")

    # ── where the time goes ──────────────────────────────────────────────────────────────────────
    def phase_time(self) -> tuple[list[Row], str]:
        """Milliseconds per phase and deploy, and where they come from: the ``time_breakdown`` view (each
        stage's exclusive time, the server's passes where the engine is traced, else the client's), or, in a
        store without it, stage self time or span durations (which overlap where a stage span is an envelope)."""
        view = _time_view("time_breakdown_select")
        if view is not None and self._has_view("time_breakdown"):
            for side, key in (("server", "server_span_id"), ("client", "client_span_id")):
                # a client pass that saw no first token (a buffered answer, a failed call) observed only the whole
                # call: one part beyond its connection (time_views.pass_is_split), not 'unobserved' of itself
                whole = (f"CASE WHEN p.ttft_ms IS NULL AND t.stage <> '{S.ARRIVAL_CONNECTION}' "
                         f"THEN '{WHOLE_CALL_TITLE}' ELSE coalesce(t.phase, t.stage) END" if side == "client"
                         else "coalesce(t.phase, t.stage)")
                rows = self.rows(f"""SELECT {whole} AS phase, p.deploy, sum(t.exclusive_ms) AS ms
                    FROM ({view(self._sampled_spans())}) t JOIN {PASSES} p ON t.pass_span_id = p.{key} GROUP BY 1, 2""")
                if rows:
                    return self._in_deploy_order(rows), (f"time_breakdown view, {side} passes (exclusive time per "
                                                         f"stage; {self._sample_note()})")
        trace_deploy = f"(SELECT trace_id, any_value(deploy) AS deploy FROM {PASSES} GROUP BY trace_id)"
        recent = self.query.one(f"""SELECT count(*) AS n FROM (SELECT attributes FROM {self.query.spans}
            WHERE stage IS NOT NULL ORDER BY start_ns DESC LIMIT 5000) WHERE json_exists(attributes, '$."{SELF_MS}"')""")
        if recent.get("n"):
            ms = f"coalesce(TRY_CAST(json_extract_string(s.attributes, '$.\"{SELF_MS}\"') AS DOUBLE), s.duration_ms)"
            source = f"stage self time ({SELF_MS})"
        else:
            ms = "s.duration_ms"
            source = "stage span durations (self time not recorded: envelope spans overlap)"
        rows = self.rows(f"""SELECT s.phase, d.deploy, sum({ms}) AS ms FROM {self.query.spans} s
            JOIN {trace_deploy} d USING (trace_id) WHERE s.stage IS NOT NULL AND s.phase IS NOT NULL GROUP BY 1, 2""")
        return self._in_deploy_order(rows), source

    def ttft_parts(self) -> tuple[list[Row], str]:
        """Mean milliseconds of each part of the time to first token per deploy (means, so the parts add up to
        the mean TTFT): the ``ttft_breakdown`` view's components where the store has it, else what the
        server's stages record (queue wait, intake, prefix lookup, prefill, the rest); plus ``client side``,
        what the client waited beyond the server's TTFT (network, proxies, a provider's front door)."""
        view = _time_view("ttft_breakdown_select")
        if view is not None and self._has_view("ttft_breakdown"):
            rows = self.rows(f"""
                WITH t AS (SELECT p.deploy, t.pass_span_id, t.component AS part, t.ms
                           FROM ({view(self._sampled_spans())}) t JOIN {PASSES} p ON t.pass_span_id = p.server_span_id)
                SELECT deploy, part, sum(ms) / any_value(n) AS ms FROM t
                JOIN (SELECT deploy, count(DISTINCT pass_span_id) AS n FROM t GROUP BY 1) USING (deploy)
                GROUP BY 1, 2""")
            source = f"ttft_breakdown view (server passes; {self._sample_note()})"
        else:
            q = self.query
            adm = q.stage_sql(S.ARRIVAL_ADMISSION, {"wait": N.ADMISSION_QUEUE_WAIT_MS})
            pre = q.stage_sql(S.FORWARD_PREFILL, {"pms": N.PREFILL_MS, "self": SELF_MS})
            pm = q.stage_sql(S.CACHE_PREFIX_MATCH, {"self": SELF_MS})
            intake = (f"(SELECT parent_span_id, sum(duration_ms) AS ms FROM {q.spans} WHERE phase = 'intake' "
                      "AND stage IS NOT NULL GROUP BY 1)")
            wide = self.rows(f"""
                WITH parts AS (
                    SELECT p.deploy, coalesce(a.wait, 0) AS queue, coalesce(i.ms, 0) AS intake,
                           coalesce(m.self, m.duration_ms, 0) AS cache_lookup,
                           coalesce(f.self, f.pms, f.duration_ms, 0) AS prefill, p.ttft_ms
                    FROM {PASSES} p JOIN {adm} a ON a.parent_span_id = p.server_span_id
                    LEFT JOIN {intake} i ON i.parent_span_id = p.server_span_id
                    LEFT JOIN {pm} m ON m.parent_span_id = p.server_span_id
                    LEFT JOIN {pre} f ON f.parent_span_id = p.server_span_id
                    WHERE p.ttft_ms IS NOT NULL)
                SELECT deploy, avg(queue) AS queue, avg(intake) AS intake, avg(cache_lookup) AS cache_lookup,
                       avg(prefill) AS prefill,
                       avg(greatest(ttft_ms - queue - intake - cache_lookup - prefill, 0)) AS other_server
                FROM parts GROUP BY deploy""")
            rows = [{"deploy": r["deploy"], "part": k, "ms": r[k]} for r in wide
                    for k in ("queue", "intake", "cache_lookup", "prefill", "other_server")]
            source = "server stage values (queue wait, intake spans, prefix lookup, prefill)"
        client = self.rows(f"""
            SELECT p.deploy, avg(greatest(c.ttft - p.ttft_ms, 0)) AS ms FROM {PASSES} p
            JOIN (SELECT span_id, {attr(N.TTFT_MS)} AS ttft
                  FROM {self._sampled_spans()} WHERE span_id IN (SELECT client_span_id FROM {PASSES}
                                                                  WHERE server_span_id IS NOT NULL)) c
              ON c.span_id = p.client_span_id
            WHERE p.server_span_id IS NOT NULL AND c.ttft IS NOT NULL AND p.ttft_ms IS NOT NULL GROUP BY 1""")
        deploys = {r["deploy"] for r in rows}
        rows += [{"deploy": r["deploy"], "part": "client side", "ms": r["ms"]} for r in client if r["deploy"] in deploys]
        return self._in_deploy_order(rows), source

    def _sampled_spans(self) -> str:
        """The spans of up to ``SAMPLE_PER_DEPLOY`` passes per deploy, drawn uniformly (by a hash of the trace
        id, so the same store gives the same sample). The time views parse every stage span's JSON; over a
        sample their shares are the same to well under a percent, at a fraction of the cost on big stores."""
        if not self._sample_made:
            self.conn.execute(f"""CREATE OR REPLACE TEMP TABLE {SAMPLE} AS SELECT DISTINCT trace_id FROM {PASSES}
                QUALIFY row_number() OVER (PARTITION BY deploy ORDER BY hash(trace_id)) <= {SAMPLE_PER_DEPLOY}""")
            # Their spans copied once: the views below, and the prompt-text check, read a few thousand traces'
            # spans instead of scanning the store's millions each time.
            self.conn.execute(f"""CREATE OR REPLACE TEMP TABLE {SAMPLE_SPANS} AS SELECT * FROM {self.query.spans}
                WHERE trace_id IN (SELECT trace_id FROM {SAMPLE})""")
            self._sample_made = True
        return SAMPLE_SPANS

    def _sample_note(self) -> str:
        n = int(scalar(self.conn.execute(f"SELECT count(*) FROM {SAMPLE}")))
        total = int(scalar(self.conn.execute(f"SELECT count(DISTINCT trace_id) FROM {PASSES}")))
        return "all traces" if n >= total else f"a uniform sample of {n:,} of {total:,} traces, ≤ {SAMPLE_PER_DEPLOY:,} per deploy"

    def mean_ttft(self) -> dict[str, float]:
        """Mean TTFT per deploy of the passes the server traced (what the TTFT parts should add up to)."""
        return {str(r["deploy"]): float(r["ms"]) for r in self.rows(
            f"SELECT deploy, avg(ttft_ms) AS ms FROM {PASSES} WHERE server_span_id IS NOT NULL AND ttft_ms IS NOT NULL "
            "GROUP BY 1")}

    def _in_deploy_order(self, rows: list[Row]) -> list[Row]:
        order = {str(r["deploy"]): i for i, r in enumerate(self.rows(
            f"SELECT deploy FROM {PASSES} GROUP BY deploy ORDER BY min(start_ns)"))}
        # then by the part's name: the query returns a deploy's parts in any order (and another one on ClickHouse)
        return sorted(rows, key=lambda r: (order.get(str(r["deploy"]), 1 << 30), str(r.get("phase", r.get("part")))))

    # ── KV pool ──────────────────────────────────────────────────────────────────────────────────
    def eviction_summary(self) -> Row:
        ev = self.query.stage_sql(S.CACHE_EVICTION, {"evicted": N.EVICTION_BLOCKS_EVICTED,
                                                     "pressure": N.EVICTION_PRESSURE,
                                                     "policy": N.EVICTION_POLICY})
        return self.query.one(f"""SELECT count(*) AS n, sum(evicted) AS evicted, median(pressure) AS pressure,
                                         mode(policy) AS policy FROM {ev}""")

    def block_chains(self) -> list[tuple[str, list[str], int, int]]:
        """(replica, block-hash chain, prompt tokens, cached tokens) of server passes, oldest first: the newest
        ``REPLAY_BLOCK_VISITS`` blocks' worth, from at most the newest ``REPLAY_BLOCK_VISITS // 3`` passes."""
        # Only the newest passes can fit the replay's budget (a chain has at least one block): parse those alone.
        cut = self.query.one(f"""SELECT min(start_ns) AS lo FROM (SELECT start_ns FROM {PASSES}
            WHERE server_span_id IS NOT NULL ORDER BY start_ns DESC LIMIT {REPLAY_BLOCK_VISITS // 3})""").get("lo")
        extra = f"AND start_ns >= {int(cut)}" if cut is not None else ""
        tok = self.query.stage_sql(S.INTAKE_TOKENIZATION, {"chain": N.TOKENIZATION_BLOCK_HASHES},
                                   extra)
        rows = self.conn.execute(f"""
            SELECT replica, chain, prompt_tokens, cached_tokens FROM (
                SELECT coalesce(r.replica, '') AS replica, t.chain, coalesce(r.prompt_tokens, 0) AS prompt_tokens,
                       coalesce(r.cached_tokens, 0) AS cached_tokens, t.start_ns,
                       sum(len(t.chain)) OVER (ORDER BY t.start_ns DESC ROWS UNBOUNDED PRECEDING) AS visits
                FROM {tok} t JOIN {PASSES} r ON r.server_span_id = t.parent_span_id
                WHERE len(t.chain) > 0)
            WHERE visits <= {REPLAY_BLOCK_VISITS} ORDER BY start_ns""").fetchall()
        return [(str(r[0]), list(r[1]), int(r[2]), int(r[3])) for r in rows]

    # ── traces ───────────────────────────────────────────────────────────────────────────────────
    def existing_traces(self, trace_ids: Sequence[str]) -> set[str]:
        """Which of these traces are in the selection: most have a pass (a small table), the rest are looked up
        in the spans."""
        if not trace_ids:
            return set()
        marks = ", ".join("?" for _ in trace_ids)
        found = {str(r[0]) for r in self.conn.execute(
            f"SELECT DISTINCT trace_id FROM {PASSES} WHERE trace_id IN ({marks})", list(trace_ids)).fetchall()}
        rest = [t for t in trace_ids if t not in found]
        if rest:
            marks = ", ".join("?" for _ in rest)
            found |= {str(r[0]) for r in self.conn.execute(
                f"SELECT DISTINCT trace_id FROM {self.query.spans} WHERE trace_id IN ({marks})", rest).fetchall()}
        return found

    def traces(self, trace_ids: Sequence[str]) -> dict[str, list[Span]]:
        """The spans of each trace (at most ``MAX_TRACE_SPANS`` each), in one scan of the store."""
        if not trace_ids:
            return {}
        marks = ", ".join("?" for _ in trace_ids)
        # The store is written in time order, so a time range lets DuckDB skip most of it; an hour either side
        # of the traces' passes holds their agent spans and tools (a trace without a pass gets no range).
        lo, hi, n = first_row(self.conn.execute(f"SELECT min(start_ns), max(start_ns), count(DISTINCT trace_id) "
                                                f"FROM {PASSES} WHERE trace_id IN ({marks})", list(trace_ids)))
        near = (f" AND start_ns BETWEEN {int(lo) - HOUR_NS} AND {int(hi) + HOUR_NS}"
                if lo is not None and n == len(set(trace_ids)) else "")
        rows = self.conn.execute(
            f"SELECT trace_id, {SPAN_RECORD_COLUMNS} FROM {self.query.spans} WHERE trace_id IN ({marks}){near} "
            f"QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY start_ns, span_id) <= {MAX_TRACE_SPANS} "
            "ORDER BY trace_id, start_ns, span_id", list(trace_ids)).fetchall()
        out: dict[str, list[Span]] = {t: [] for t in trace_ids}
        for row in rows:
            out[str(row[0])].append(span_record(row[1:]))
        return out

    def pass_rows(self, trace_ids: Sequence[str]) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {t: [] for t in trace_ids}
        if trace_ids:
            marks = ", ".join("?" for _ in trace_ids)
            for r in self.rows(f"SELECT * FROM {PASSES} WHERE trace_id IN ({marks}) ORDER BY start_ns", list(trace_ids)):
                out[str(r["trace_id"])].append(r)
        return out

    def sample_traces(self, deploy: str | None = None, n: int = 1) -> list[str]:
        """The slowest-TTFT traces, of one deploy when given (the regression page's side by side)."""
        where, params = ("deploy = ? AND ", [deploy]) if deploy is not None else ("", [])
        return [str(r["trace_id"]) for r in self.rows(
            f"SELECT trace_id, max(ttft_ms) AS t FROM {PASSES} WHERE {where}ttft_ms IS NOT NULL "
            f"GROUP BY trace_id ORDER BY t DESC, trace_id LIMIT {int(n)}", params)]


def _time_view(name: str) -> Callable[[str], str] | None:
    """The SELECT of a time view over a given span relation, from the tracer (None in a version without it)."""
    try:
        from llmtrace.tracer.storage import time_views
    except ImportError:
        return None
    return getattr(time_views, name, None)


def _int(v: int | None) -> int | None:
    return None if v is None else int(v)
