"""Builds the report: read the selection once (``data``), run the analyzers on the same materialized passes,
render every chart, and assemble one HTML page (``page``).

    with read_store(db, parquet) as conn:
        html = build_report(conn, Options(selection=Selection(since_ns, "support-agent"))).html
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import duckdb

from llmtrace.analyzers.core.concurrent_run import analyze_all
from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.core.merge import merge_findings
from llmtrace.analyzers.diagnose.registry import ANALYZERS
from llmtrace.report import charts, costs, kvpool, page
from llmtrace.report.data import ReportData, Selection, Summary
from llmtrace.report.focus import Focus, focus_section
from llmtrace.report.traces import layout, waterfall_rows
from llmtrace.tracer.registry import names as N


@dataclass(frozen=True, slots=True)
class Options:
    selection: Selection = field(default_factory=Selection)
    source: str = ""  # the store or glob, for the header
    title: str = "llmtrace report"
    max_traces: int = 8  # trace pages; each costs a chart render (~0.1 s), so the total is capped
    traces_per_finding: int = 3
    focus: Focus | None = None  # `llmtrace check --html`: the regression first, baseline vs candidate


FILL = 3  # trace pages a report always has when the store has traces (the slowest, when no finding names one)


@dataclass(frozen=True, slots=True)
class Report:
    html: str
    findings: tuple[Finding, ...]
    trace_ids: tuple[str, ...]
    charts: int
    seconds: dict[str, float]


class _Charts:
    """Renders specs on a worker thread while the page's queries go on (the chart runtime and DuckDB both
    run outside the GIL), handing back a placeholder that :meth:`fill` swaps for the SVG; keeps count and
    time for the benchmark."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmtrace-charts")
        self._jobs: dict[str, Future[str]] = {}

    def __call__(self, spec: dict[str, Any]) -> str:
        token = f"\x00chart-{len(self._jobs)}\x00"
        self._jobs[token] = self._pool.submit(self._render, spec)
        self.count += 1
        return token

    def _render(self, spec: dict[str, Any]) -> str:
        t = time.perf_counter()
        try:
            return charts.render(spec)
        finally:
            self.seconds += time.perf_counter() - t

    def fill(self, html: str) -> str:
        for token, job in self._jobs.items():
            html = html.replace(token, job.result(), 1)
        return html

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def build_report(conn: duckdb.DuckDBPyConnection, options: Options | None = None) -> Report:
    opts = options or Options()
    if not charts.available():
        charts.render({})  # raises ChartsUnavailable with the extra to install, before any work
    clock = _Clock()
    data = ReportData(conn, opts.selection).open()
    try:
        clock.lap("read")
        findings = _findings(data)
        focus = opts.focus
        if focus is not None:  # the findings that explain a failed check first, then the rest in rank
            findings.sort(key=lambda f: not focus.explains(f))
        clock.lap("analyzers")
        render = _Charts()
        try:
            summary = data.summary()
            keep = opts.focus.deploys() if opts.focus is not None else None
            body, toc, trace_ids = _body(data, summary, findings, opts, render, keep)
            clock.lap("sections")  # the queries, with the charts rendering beside them
            body = render.fill(body)
        finally:
            render.close()  # never leave the worker running, after an error too
        clock.lap("charts_after_sections")  # what the charts still needed once the queries were done
        clock.secs["charts_s"] = render.seconds
    finally:
        data.close()
    html = page.document(opts.title, _meta(summary, opts), toc, body)
    return Report(html, tuple(findings), tuple(trace_ids), render.count, {k: round(v, 3) for k, v in clock.secs.items()})


class _Clock:
    """Wall and CPU seconds per step (CPU: this process, DuckDB's and the chart runtime's threads included)."""

    def __init__(self) -> None:
        self.secs: dict[str, float] = {}
        self._t, self._c = time.perf_counter(), time.process_time()

    def lap(self, name: str, minus: tuple[float, float] = (0.0, 0.0)) -> None:
        t, c = time.perf_counter(), time.process_time()
        self.secs[f"{name}_s"] = t - self._t - minus[0]
        self.secs[f"{name}_cpu_s"] = c - self._c - minus[1]
        self._t, self._c = t, c


def _findings(data: ReportData) -> list[Finding]:
    """What ``llmtrace diagnose`` prints (every analyzer, one finding per cause), on the passes the report
    already materialized."""
    per_analyzer = analyze_all(data.query, list(ANALYZERS.values()))
    return merge_findings([f for found in per_analyzer for f in found])


def _meta(s: Summary, opts: Options) -> str:
    sel = opts.selection
    parts = [f"{s.passes:,} passes in {s.traces:,} traces", f"{page.when(s.first_ns)} – {page.when(s.last_ns)}"]
    if s.services:
        parts.append("services " + ", ".join(s.services[:5]) + (" …" if len(s.services) > 5 else ""))
    if s.models:
        parts.append("models " + ", ".join(s.models[:5]) + (" …" if len(s.models) > 5 else ""))
    if opts.source:
        parts.append(f"store {opts.source}")
    if sel.service:
        parts.append(f"service {sel.service}")
    if sel.since_ns is not None:
        parts.append(f"since {page.when(sel.since_ns)}")
    parts.append("prompt text: " + ("stored (capture full)" if s.prompt_text_stored else "not stored"))
    return " · ".join(page.e(p) for p in parts)


def _pick_traces(data: ReportData, findings: list[Finding], opts: Options) -> dict[str, str]:
    """Trace id -> why it has a page: the regression's traces, each finding's first few, and, when that leaves
    fewer than ``FILL`` pages (a healthy store), the slowest traces so there is always a waterfall to read."""
    wanted: dict[str, str] = {}
    if opts.focus is not None:
        for t in opts.focus.traces(data):
            wanted.setdefault(t, "the regression")
    for i, f in enumerate(findings):
        ids = list(dict.fromkeys([*f.trace_ids, *(t for ev in f.evidence for t in ev.trace_ids)]))
        for t in ids[: opts.traces_per_finding]:
            wanted.setdefault(t, f"finding #{i + 1}")
    present = data.existing_traces(list(wanted))
    picked = {t: why for t, why in wanted.items() if t in present}
    picked = dict(list(picked.items())[: max(0, opts.max_traces)])
    room = min(FILL, opts.max_traces) - len(picked)
    if room > 0:
        for t in data.sample_traces(n=room + len(picked)):
            if len(picked) < min(FILL, opts.max_traces):
                picked.setdefault(t, "slowest TTFT")
    return picked


def _body(data: ReportData, s: Summary, findings: list[Finding], opts: Options, render: _Charts,
          keep: tuple[str, ...] | None) -> tuple[str, list[tuple[str, str]], list[str]]:
    reasons = _pick_traces(data, findings, opts)
    trace_ids = list(reasons)
    linked = set(trace_ids)
    parts: list[str] = []
    toc: list[tuple[str, str]] = []

    def add(anchor: str, title: str, inner: str) -> None:
        parts.append(page.section(anchor, title, inner))
        toc.append((anchor, title))

    def only(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        return rows if keep is None else [r for r in rows if r.get("deploy") in keep]

    # The trace pages hold most of the charts: queue them first, so they render while the other sections query.
    traces = _traces_html(data, reasons, render, s)
    if opts.focus is not None:
        add("regression", "Regression", focus_section(opts.focus, data, findings, linked))
    add("findings", "Findings", _findings_html(findings, linked, s))
    add("cache", "Cache hit rate", _cache_html(data, render, only))
    add("time", "Where the time goes", _time_html(data, render, only))
    add("latency", "TTFT and TPOT", _latency_html(data, render, only))
    add("cost", "Cost per 1,000 calls", _cost_html(data, render, keep))
    add("kv-pool", "Hit rate vs KV pool size", _pool_html(data, render))
    add("traces", "Traces", traces)
    return "".join(parts), toc, trace_ids


def _findings_html(findings: list[Finding], linked: set[str], s: Summary) -> str:
    if not findings:
        return page.card("No findings", f"<p>The analyzers found nothing to report in {s.passes:,} passes.</p>")
    return page.findings_table(findings) + "".join(page.finding_card(i + 1, f, linked) for i, f in enumerate(findings))


def _cache_html(data: ReportData, render: _Charts, only: Any) -> str:
    rows = data.hit_rate_timeline()
    marks = data.deploy_marks()
    deploys = only(data.by_deploy())
    if not rows:
        return page.card("Cache hit rate", page.absent("hit-rate-timeline", "No pass reports prompt tokens, so there "
                                                       "is no hit rate to draw."))
    timeline = page.card("Over time, with deploys marked", page.chart(render(charts.hit_rate_timeline(rows, marks)),
                                                                      "hit-rate-timeline"),
                         "Cached prompt tokens over prompt tokens per time bucket; dashed lines are deploys.")
    table = "".join(
        f"<tr><td>{page.e(d['deploy'])}</td><td class=\"num\">{int(d['passes']):,}</td>"
        f"<td class=\"num\">{_pct(d['hit_rate'])}</td><td class=\"num\">{_num(d['cached_per_call'])}</td>"
        f"<td class=\"num\">{_num(d['uncached_per_call'])}</td></tr>" for d in deploys)
    by = page.card("By deploy", page.chart(render(charts.hit_by_deploy(deploys)), "hit-rate-by-deploy") +
                   "<table><tr><th>deploy</th><th>passes</th><th>hit rate</th><th>cached tokens/call</th>"
                   f"<th>uncached tokens/call</th></tr>{table}</table>")
    return timeline + f'<div class="grid">{by}</div>'


def _time_html(data: ReportData, render: _Charts, only: Any) -> str:
    rows, source = data.phase_time()
    rows = only(rows)
    if len({r["deploy"] for r in rows}) > 1:  # the selection as a whole on top, then each deploy
        total: dict[str, float] = {}
        for r in rows:
            total[str(r["phase"])] = total.get(str(r["phase"]), 0.0) + float(r["ms"] or 0.0)
        rows = [{"phase": p, "deploy": "all deploys", "ms": v} for p, v in total.items()] + rows
    share = (page.chart(render(charts.phase_share(rows)), "phase-share") if rows
             else page.absent("phase-share", "No stage spans in the selection."))
    parts, psource = data.ttft_parts()
    parts = only(parts)
    ttft = (page.chart(render(charts.ttft_parts(parts)), "ttft-parts") if parts else
            page.absent("ttft-parts", "No server pass with its admission stage and a TTFT: TTFT can only be "
                                      "decomposed where the engine's side is traced (llmtrace serve, or a "
                                      "collector receiving the server's spans)."))
    # Say what the parts add up to beside the TTFT they decompose, so a breakdown that misses or double-counts
    # a part is visible on the page rather than trusted.
    mean = data.mean_ttft()
    sums: dict[str, float] = {}
    for p in parts:
        if p["part"] != "client side":
            sums[str(p["deploy"])] = sums.get(str(p["deploy"]), 0.0) + float(p["ms"] or 0.0)
    check = "; ".join(f"{d}: parts {v:,.0f} ms, mean server TTFT {mean[d]:,.0f} ms" for d, v in sums.items() if d in mean)
    return (page.card("Time share per phase", share, f"Source: {source}.") +
            page.card("TTFT decomposed", ttft, f"Source: {psource}. 'client side' is the client's TTFT beyond "
                                               "the server's: network, proxies, the provider's front door. "
                                               + (f"Check — {check}." if check else "")))


def _latency_html(data: ReportData, render: _Charts, only: Any) -> str:
    out = []
    for col, title in (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms per output token)")):
        rows = only(data.latency_quantiles(col))
        inner = (page.chart(render(charts.latency_box(rows, title)), f"{col}-distribution") if rows
                 else page.absent(f"{col}-distribution", f"No pass records {title.split()[0]}."))
        out.append(page.card(f"{title.split(' (')[0]} per model and deploy", inner,
                             "Box: p25–p75, tick: median, whiskers: p5–p95."))
    return f'<div class="grid">{"".join(out)}</div>'


def _cost_html(data: ReportData, render: _Charts, keep: tuple[str, ...] | None) -> str:
    sums = data.cost_sums()
    if keep is not None:
        sums = [s for s in sums if s["deploy"] in keep]
    rows, r2 = costs.by_deploy(sums)
    if not any(r.recorded_per_1k for r in rows):
        return page.card("Cost", page.absent("cost-split", "No pass records a cost (llmtrace.meters.cost_usd): "
                                                           "price the calls with the meters helpers to see it."))
    values = [{"deploy": charts.short(r.deploy), "kind": k, "usd": v} for r in rows for k, v in r.per_1k.items()]
    note = ("Split into uncached input, cached input and output with per-model unit prices fitted to the "
            f"recorded costs (least squares, worst R² {r2:.4f})." if r2 is not None else
            "Costs could not be split by token kind; totals shown.")
    table = "".join(f"<tr><td>{page.e(r.deploy)}</td><td class=\"num\">{r.passes:,}</td>"
                    + "".join(f"<td class=\"num\">${r.per_1k.get(k, 0.0):.4f}</td>" for k in costs.KINDS)
                    + f"<td class=\"num\">{'$' + format(r.recorded_per_1k, '.4f') if r.recorded_per_1k is not None else 'n/a'}</td></tr>"
                    for r in rows)
    head = "".join(f"<th>{k}</th>" for k in costs.KINDS)
    return page.card("By deploy", page.chart(render(charts.cost_split(values)), "cost-split") +
                     f"<table><tr><th>deploy</th><th>calls</th>{head}<th>recorded total</th></tr>{table}</table>", note)


def _pool_html(data: ReportData, render: _Charts) -> str:
    ev = data.eviction_summary()
    if not ev.get("n"):
        return page.card("KV pool", page.absent("kv-pool", "No eviction records (cache.eviction spans) in this "
                                                "selection: the curve needs the bundled backend's engine spans "
                                                "(llmtrace serve), which a hosted provider does not expose."))
    curve = kvpool.replay(data.block_chains())
    if curve is None:
        return page.card("KV pool", page.absent("kv-pool", "Eviction records exist, but no pass records its "
                                                "block-hash chain (intake.tokenization), so nothing can be replayed."))
    points = [{"blocks": p.blocks, "hit": p.hit_rate} for p in curve.points]
    note = (f"Replay of the {curve.passes:,} newest passes' block-hash chains ({curve.distinct_blocks:,} distinct "
            f"blocks) through an LRU prefix cache per replica. In the store: {int(ev.get('evicted') or 0):,} blocks "
            f"evicted, median pool pressure {_pct(ev.get('pressure'))}, policy {ev.get('policy')}.")
    return page.card("Hit rate against pool size", page.chart(render(charts.pool_curve(points, curve.measured_hit_rate)),
                                                              "kv-pool"), note)


def _traces_html(data: ReportData, reasons: dict[str, str], render: _Charts, s: Summary) -> str:
    if not reasons:
        return page.card("No trace pages", "<p>No finding names a trace that is in the selection.</p>")
    capture = ("Prompt text not stored (capture mode hashes or none): only hashes and hash chains are kept."
               if not s.prompt_text_stored else "No prompt text on this trace's passes.")
    out = []
    spans = data.traces(list(reasons))
    passes = data.pass_rows(list(reasons))
    for tid, why in reasons.items():
        view = layout(tid, spans[tid])
        if view is None:
            continue
        sides = [(title, waterfall_rows(view, rows)) for title, rows in
                 (("client side (what the app saw)", view.client), (_server_title(view.server), view.server)) if rows]
        svg = render(charts.waterfall(sides))  # one chart, one clock, both sides: one render instead of two
        out.append(page.trace_section(view, svg, passes[tid], capture, why))
    return "".join(out)


def _server_title(rows: tuple[Any, ...]) -> str:
    """The engine side's title; it says so where collect joined the engine's trace to the call by response id
    (llmtrace.join.by on the engine's pass: tracer/collect/otlp_join.py), not by a propagated traceparent."""
    joined = next((str(r.span.attributes[N.JOIN_BY]) for r in rows if r.span.attributes.get(N.JOIN_BY)), None)
    return ("server side (the engine)" if joined is None
            else f"server side (the engine, joined to the call by {joined.replace('_', ' ')})")


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{float(v):.1%}"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{float(v):,.0f}"
