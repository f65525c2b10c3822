"""The HTML around the charts: one file, styles inline, no script, no external resource, so it opens the
same on an air-gapped laptop, as a CI artifact and in a mail attachment. Every string from the store is
escaped here; the SVG comes from the chart renderer."""

from __future__ import annotations

import datetime as dt
from html import escape

from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.core.finding_layout import layout
from llmtrace.analyzers.core.query import as_float
from llmtrace.analyzers.symptoms.failed_calls import clean_message
from llmtrace.report.charts import PHASE_COLOURS
from llmtrace.report.traces import Row, TraceView, boundary_values
from llmtrace.tracer.registry.semconv import ERROR_TYPE

CSS = """
:root{--fg:#1d2430;--muted:#5c6675;--line:#e3e7ee;--bg:#f5f7fa;--card:#fff;--crit:#d64545;--warn:#e08a1e;--info:#3d7fd9}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);background:var(--bg)}
header.top{background:#1d2430;color:#fff;padding:18px 32px}
header.top h1{margin:0 0 4px;font-size:20px;font-weight:600}
header.top .meta{color:#c3cad6;font-size:12.5px}
nav.toc{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid var(--line);padding:8px 32px;display:flex;gap:18px;flex-wrap:wrap}
nav.toc a{color:var(--muted);text-decoration:none;font-size:13px}
nav.toc a:hover{color:var(--fg)}
main{max-width:1180px;margin:0 auto;padding:20px 32px 60px}
section.block{margin:0 0 28px}
section.block>h2{font-size:17px;margin:0 0 10px;padding-top:8px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px;margin:0 0 12px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:12px}
.grid>.card{margin:0}
.card h3{font-size:14px;margin:0 0 8px}
.note{color:var(--muted);font-size:12.5px;margin:6px 0 0}
.failed{color:#c0392b;margin:6px 0}
.chart svg{max-width:100%;height:auto;display:block}
.kpis{display:flex;gap:12px;flex-wrap:wrap}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:150px}
.kpi b{display:block;font-size:19px}
.kpi span{color:var(--muted);font-size:12px}
.finding{border-left:4px solid var(--info)}
.finding.critical{border-left-color:var(--crit)}
.finding.warning{border-left-color:var(--warn)}
.finding h3{display:flex;gap:10px;align-items:baseline;font-size:15px}
.rank{color:var(--muted);font-weight:400}
.sev{font-size:11px;text-transform:uppercase;letter-spacing:.04em;padding:1px 7px;border-radius:10px;color:#fff;background:var(--info)}
.sev.critical{background:var(--crit)}.sev.warning{background:var(--warn)}
.stage{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px;padding:1px 6px;border-radius:4px;background:#eef1f5}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:500;font-size:12px}
td.num{text-align:right;font-variant-numeric:tabular-nums}
a.tr{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;color:var(--info);text-decoration:none;margin-right:8px}
a.tr:hover{text-decoration:underline}
table.ranking a{color:var(--fg);text-decoration:none}table.ranking a:hover{text-decoration:underline}
span.tr{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;color:var(--muted);margin-right:8px}
.next{margin:8px 0 0;font-size:13px}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.sides>div{min-width:0}
.sides h4{margin:0 0 6px;font-size:13px;color:var(--muted);font-weight:600}
details{margin:6px 0}
summary{cursor:pointer;color:var(--muted);font-size:12.5px}
.bv td:first-child{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;color:var(--muted);width:48%}
.bv td{font-size:12px;word-break:break-all}
.dot{display:inline-block;width:9px;height:9px;border-radius:2px;margin-right:5px;vertical-align:middle}
.pass{color:#1e7a3a;font-weight:600}.fail{color:var(--crit);font-weight:600}.skip{color:var(--muted)}.warn{color:#9a6a00;font-weight:600}
.trace:target{outline:2px solid var(--info)}
section.block,.trace,.finding{scroll-margin-top:46px}
pre.text{white-space:pre-wrap;font-size:12px;background:#f7f8fa;border:1px solid var(--line);padding:8px;border-radius:6px;max-height:240px;overflow:auto}
"""


def e(v: object) -> str:
    return escape("" if v is None else str(v), quote=True)


def trace_anchor(trace_id: str) -> str:
    return f"trace-{trace_id}"


def document(title: str, meta: str, toc: list[tuple[str, str]], body: str) -> str:
    links = "".join(f'<a href="#{e(a)}">{e(t)}</a>' for a, t in toc)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<meta name=\"generator\" content=\"llmtrace report\"><title>{e(title)}</title><style>{CSS}</style></head>"
            f"<body><header class=\"top\"><h1>{e(title)}</h1><div class=\"meta\">{meta}</div></header>"
            f"<nav class=\"toc\">{links}</nav><main>{body}</main></body></html>\n")


def section(anchor: str, title: str, inner: str) -> str:
    return f'<section class="block" id="{e(anchor)}"><h2>{e(title)}</h2>{inner}</section>'


def card(title: str, inner: str, note: str = "", cls: str = "") -> str:
    n = f'<p class="note">{e(note)}</p>' if note else ""
    return f'<div class="card {cls}"><h3>{e(title)}</h3>{inner}{n}</div>'


def chart(svg: str, name: str) -> str:
    return f'<div class="chart" data-chart="{e(name)}">{svg}</div>'


def absent(name: str, why: str) -> str:
    return f'<div class="chart-absent" data-chart-absent="{e(name)}"><p class="note">{e(why)}</p></div>'


def kpis(items: list[tuple[str, str]]) -> str:
    return '<div class="kpis">' + "".join(f'<div class="kpi"><b>{e(v)}</b><span>{e(k)}</span></div>'
                                          for k, v in items) + "</div>"


def trace_links(ids: tuple[str, ...], linked: set[str]) -> str:
    out = []
    for t in dict.fromkeys(ids):  # evidence may name a trace once per pass
        if t in linked:
            out.append(f'<a class="tr" href="#{trace_anchor(t)}" title="open the trace">{e(t[:12])}…</a>')
        else:
            out.append(f'<span class="tr" title="trace {e(t)} (no page in this report)">{e(t[:12])}…</span>')
    return "".join(out)


def findings_table(findings: list[Finding]) -> str:
    """The ranking at a glance, each row a link to its card."""
    rows = "".join(
        f'<tr><td class="num">{i + 1}</td><td><span class="sev {e(f.severity)}">{e(f.severity)}</span></td>'
        f'<td><span class="dot" style="background:{PHASE_COLOURS.get(f.phase, "#999")}"></span>'
        f'<span class="stage">{e(f.stage)}</span></td><td><a href="#finding-{i + 1}">{e(f.title)}</a></td>'
        f'<td class="num">{len(f.trace_ids)}</td></tr>' for i, f in enumerate(findings))
    return ('<div class="card"><table class="ranking"><tr><th>#</th><th>severity</th><th>stage</th><th>finding</th>'
            f'<th>traces</th></tr>{rows}</table></div>')


def finding_card(rank: int, finding: Finding, linked: set[str]) -> str:
    """One finding's parts as the terminal and the explorer lay them out (analyzers/core/finding_layout.py), in HTML."""
    f = layout(finding, rank)
    same = set(f.trace_ids)

    def ev_traces(ids: tuple[str, ...]) -> str:  # most evidence quotes the finding's own traces: say so once
        if ids and set(ids) <= same:
            return '<span class="tr">the finding\'s traces</span>'
        return trace_links(ids, linked)

    rows = "".join(
        f"<tr><td>{e(ev.label)}</td><td class=\"num\">{e(ev.value)}</td>"
        f"<td>{ev_traces(ev.trace_ids)}</td></tr>" for ev in f.evidence)
    colour = PHASE_COLOURS.get(f.phase, "#999")
    evidence = (f"<table><tr><th>evidence</th><th>value</th><th>traces</th></tr>{rows}</table>" if rows else "")
    traces = trace_links(f.trace_ids, linked)
    return (f'<div class="card finding {e(f.severity)}" id="finding-{rank}" data-finding="{e(f.symptom)}">'
            f'<h3><span class="rank">#{rank}</span> {e(f.title)} <span class="sev {e(f.severity)}">{e(f.severity)}</span></h3>'
            f'<p><span class="dot" style="background:{colour}"></span><span class="stage">{e(f.stage)}</span> '
            f'· {e(f.phase)} · symptom {e(f.symptom)} · score {f.score:.2f}</p>'
            f"<p>{e(f.summary)}</p>{evidence}"
            f'<p class="next"><b>Next:</b> {e(f.next_check)}</p>'
            f'<p class="note">traces: {traces or "none"}</p></div>')


def _side(rows: tuple[Row, ...], title: str) -> str:
    if not rows:
        return f"<div><h4>{e(title)}</h4><p class=\"note\">no spans on this side</p></div>"
    tables = []
    for i, r in enumerate(rows):
        values = boundary_values(r)
        own = r.span.self_ms
        timing = f"{r.span.duration_ms:.2f} ms" + (f", self {own:.2f} ms" if own is not None else "")
        if not r.timed:  # a wait that holds the stage (traces.Row.timed): its length is not the stage's time
            timing = f"own time unseen (inside a {r.span.duration_ms:.2f} ms wait for the first byte)"
        body = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in values) or \
            '<tr><td colspan="2">no boundary values</td></tr>'
        tables.append(f"<details><summary>{i + 1}. {e(r.label)} · {e(timing)}</summary>"
                      f"<table class=\"bv\">{body}</table></details>")
    return f"<div><h4>{e(title)}: boundary values</h4>{''.join(tables)}</div>"


def trace_section(view: TraceView, svg: str, passes: list[dict[str, object]], capture_note: str,
                  why: str = "") -> str:
    head = kpis([("duration", f"{view.duration_ms:,.1f} ms"), ("passes", str(len(passes))),
                 ("deploy", str(passes[0]["deploy"]) if passes else "?"),
                 ("TTFT", _ms(passes[0].get("ttft_ms")) if passes else "n/a")])
    texts = "".join(f"<details><summary>{e(k)}</summary><pre class=\"text\">{e(v[:4000])}</pre></details>"
                    for k, v in view.texts) or f'<p class="note">{e(capture_note)}</p>'
    # a failed call says why before anything else: the client's message first (what the app saw)
    failed = sorted((r.span for r in (*view.client, *view.server) if r.kind == "pass" and r.span.status == "error"),
                    key=lambda s: (s.side == "server", s.start_ns))
    failure = "".join(
        f'<p class="failed"><b>failed:</b> {e(clean_message(s.status_message) or "no message recorded")}'
        + (f' <span class="note">({e(s.side or "?")} pass, error.type {e(s.attributes[ERROR_TYPE])})</span>'
           if s.attributes.get(ERROR_TYPE) else f' <span class="note">({e(s.side or "?")} pass)</span>') + "</p>"
        for s in failed)
    return (f'<div class="card trace" id="{trace_anchor(view.trace_id)}" data-trace="{e(view.trace_id)}">'
            f'<h3>trace <span class="stage">{e(view.trace_id)}</span> <span class="rank">{e(why)}</span></h3>{head}'
            f'{failure}'
            '<p class="note">Solid bars are each stage\'s own time where it records it (llmtrace.stage.self_ms), '
            'faint bars its span; without self time the span is drawn solid. A stage marked (unseen) is a wait the '
            'client saw that holds it (up to the first response byte), not its own time: drawn faint only. Both '
            'sides share one clock.</p>'
            f'{chart(svg, "waterfall")}'
            f'<div class="sides">{_side(view.client, "client side")}{_side(view.server, "server side")}</div>'
            f'{texts}</div>')


def _ms(v: object) -> str:
    return "n/a" if v is None else f"{as_float(v):,.1f} ms"


def when(ns: int | None) -> str:
    if ns is None:
        return "?"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
