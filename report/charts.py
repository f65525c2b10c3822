"""The report's charts: Vega-Lite specs, rendered to inline SVG at build time by ``vl-convert-python``
(Vega-Lite and Vega in an embedded JavaScript runtime, no browser, no network).

Why this library: the page must open air-gapped and as a CI artifact, so it cannot fetch a charting script;
inlining Plotly's would add its ~4.6 MB bundle to every report, and rendering in the browser would make an
empty page of a script error. Static SVG costs a few kilobytes per chart and needs nothing to display
(numbers in docs/report.md and benchmarks/results/report.json).

``vl-convert-python`` is the optional extra ``report``; everything else in ``llmtrace.report`` imports
without it, and :func:`render` says which extra to install.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from llmtrace.analyzers.core.query import Row
from llmtrace.tracer.storage.time_views import WHOLE_CALL_TITLE

PHASE_COLOURS: dict[str, str] = {  # the explorer's eight, a shade deeper so they read on white
    "arrival": "#4c9be8", "intake": "#6cc16c", "cache": "#e8b931", "forward": "#ef6b6b",
    "generation": "#b86ce8", "loops": "#3fbcbc", "safety": "#f09540", "meters": "#9a9a9a",
}
PHASE_ORDER = list(PHASE_COLOURS)
# time_breakdown's rows no stage claims, and a client pass that could not be split (time_views.pass_is_split)
EXTRA_PHASES = {"unobserved": "#d7dbe1", "other": "#b0b6bf", WHOLE_CALL_TITLE: "#8d96a3"}
TTFT_PARTS = ("queue", "routing", "intake", "cache_lookup", "prefill", "batching", "first_token",
              "detokenizer_holdback", "delivery", "other_server", "other", "client side")
TTFT_COLOURS = ("#4c9be8", "#8fc2f2", "#6cc16c", "#e8b931", "#ef6b6b", "#f4a6a6", "#b86ce8", "#d9b8f2",
                "#3fbcbc", "#c9ccd1", "#c9ccd1", "#8d96a3")
COST_COLOURS = {"uncached input": "#ef6b6b", "cached input": "#6cc16c", "output": "#4c9be8",
                "total (not split)": "#9a9a9a"}
WIDTH = 1000  # full-width charts; the page scales them down on narrow screens
# labelLimit 0: Vega truncates a label that may be too long by measuring it again and again, which is most of
# a chart's render time here (~1.5 ms a label); labels are cut to length in Python instead.
_CONFIG = {"view": {"stroke": None}, "axis": {"labelFontSize": 11, "titleFontSize": 11, "grid": True,
                                              "gridColor": "#eceff3", "labelLimit": 0},
           "legend": {"labelFontSize": 11, "titleFontSize": 11, "orient": "bottom", "labelLimit": 0},
           "font": "Helvetica, Arial, sans-serif", "background": "white"}
_ids = itertools.count(1)
DISTRIBUTION = "llmtrace-stages"  # the PyPI name (llmtrace/cli.py says the same for the other extras)


class ChartsUnavailable(RuntimeError):
    """vl-convert-python is not installed."""


def available() -> bool:
    try:
        import vl_convert  # noqa: F401
    except ImportError:
        return False
    return True


def render(spec: dict[str, Any]) -> str:
    """One Vega-Lite spec as an SVG element, with ids made unique so many charts can share one page."""
    try:
        import vl_convert as vlc
    except ImportError:
        raise ChartsUnavailable("llmtrace report draws its charts with vl-convert-python, which is not "
                                f"installed: pip install '{DISTRIBUTION}[report]'") from None
    full = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "config": _CONFIG, **spec}
    svg = vlc.vegalite_to_svg(full)
    return _unique_ids(svg, f"c{next(_ids)}")


def _unique_ids(svg: str, prefix: str) -> str:
    # Vega numbers clip paths and gradients from 1 in every chart; inline on one page the first one wins.
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg
    pattern = re.compile(r'(\bid="|url\(#|href="#)(' + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r')(?=["\)])')
    return pattern.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)


# ── specs ──────────────────────────────────────────────────────────────────────────────────────────
def short(deploy: object) -> str:
    """A deploy as a chart label: CI names deploys by commit (40 hex characters), which no axis can hold;
    tables beside the charts keep the full name."""
    text = str(deploy)
    return text if len(text) <= 16 else text[:12] + "…"


def _cut(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def hit_rate_timeline(rows: list[Row], marks: list[Row]) -> dict[str, Any]:
    points = [{"t": int(r["t_ns"]) // 1_000_000, "deploy": short(r["deploy"]), "hit": r["hit_rate"], "passes": r["passes"]}
              for r in rows]
    layers: list[dict[str, Any]] = [{
        "data": {"values": points},
        "mark": {"type": "line", "point": {"size": 18}, "strokeWidth": 2},
        "encoding": {
            "x": {"field": "t", "type": "temporal", "title": "time (UTC)", "scale": {"type": "utc"},
                  "axis": {"format": "%H:%M", "labelOverlap": True}},
            "y": {"field": "hit", "type": "quantitative", "title": "cache hit rate", "axis": {"format": "%"},
                  "scale": {"domain": [0, 1]}},
            "color": {"field": "deploy", "type": "nominal", "title": "deploy"}}}]
    if marks:
        ms = [{"t": int(m["at_ns"]) // 1_000_000, "label": f"deploy {short(m['deploy'])}"} for m in marks]
        layers.append({"data": {"values": ms}, "mark": {"type": "rule", "strokeDash": [4, 3], "color": "#444"},
                       "encoding": {"x": {"field": "t", "type": "temporal"}}})
        layers.append({"data": {"values": ms}, "mark": {"type": "text", "align": "left", "dx": 4, "dy": -4,
                                                          "baseline": "top", "fontSize": 11, "color": "#444"},
                       "encoding": {"x": {"field": "t", "type": "temporal"}, "y": {"value": 2},
                                    "text": {"field": "label"}}})
    return {"width": WIDTH, "height": 220, "layer": layers}


def hit_by_deploy(rows: list[Row]) -> dict[str, Any]:
    data = [{"deploy": short(r["deploy"]), "hit": r["hit_rate"] or 0.0, "passes": r["passes"]} for r in rows]
    enc = {"x": {"field": "deploy", "type": "nominal", "sort": None, "title": "deploy", "axis": {"labelAngle": 0}},
           "y": {"field": "hit", "type": "quantitative", "title": "cache hit rate", "axis": {"format": "%"},
                 "scale": {"domain": [0, 1]}}}
    return {"width": 300, "height": 200, "data": {"values": data}, "encoding": enc, "layer": [
        {"mark": {"type": "bar", "color": "#e8b931", "width": {"band": 0.6}}},
        {"mark": {"type": "text", "dy": -6, "fontSize": 11}, "encoding": {"text": {"field": "hit", "format": ".1%"}}}]}


def phase_share(rows: list[Row]) -> dict[str, Any]:
    data = [{"phase": r["phase"], "deploy": short(r["deploy"]), "ms": float(r["ms"] or 0.0)} for r in rows]
    return {"width": WIDTH, "height": {"step": 26}, "data": {"values": data},
            "transform": [{"joinaggregate": [{"op": "sum", "field": "ms", "as": "total"}], "groupby": ["deploy"]},
                          {"calculate": "datum.ms / datum.total", "as": "share"},
                          {"calculate": f"indexof({[*PHASE_ORDER, *EXTRA_PHASES]!r}, datum.phase)", "as": "order"}],
            "mark": {"type": "bar"},
            "encoding": {
                "y": {"field": "deploy", "type": "nominal", "title": "deploy", "sort": None},
                "x": {"field": "share", "type": "quantitative", "stack": "zero", "title": "share of stage time",
                      "axis": {"format": "%"}, "scale": {"domain": [0, 1]}},
                "order": {"field": "order"},
                "color": {"field": "phase", "type": "nominal", "title": "phase",
                          "scale": {"domain": [*PHASE_ORDER, *EXTRA_PHASES],
                                    "range": [*PHASE_COLOURS.values(), *EXTRA_PHASES.values()]}}}}


def ttft_parts(rows: list[Row]) -> dict[str, Any]:
    """Rows: deploy, part, ms (mean per pass). Parts in pipeline order, unknown ones after them."""
    seen = list(dict.fromkeys(str(r["part"]) for r in rows))
    parts = [p for p in TTFT_PARTS if p in seen] + [p for p in seen if p not in TTFT_PARTS]
    data = [{"deploy": short(r["deploy"]), "part": r["part"], "ms": float(r["ms"] or 0.0),
             "order": parts.index(str(r["part"]))} for r in rows]
    # each part keeps its colour whichever others are present
    colours = [TTFT_COLOURS[TTFT_PARTS.index(p)] if p in TTFT_PARTS else "#aab1bb" for p in parts]
    return {"width": WIDTH, "height": {"step": 26}, "data": {"values": data}, "mark": {"type": "bar"},
            "encoding": {
                "y": {"field": "deploy", "type": "nominal", "sort": None, "title": "deploy"},
                "x": {"field": "ms", "type": "quantitative", "stack": "zero", "title": "mean ms of TTFT per pass"},
                "order": {"field": "order"},
                "color": {"field": "part", "type": "nominal", "title": "part of TTFT",
                          "scale": {"domain": parts, "range": colours}}}}


def latency_box(rows: list[Row], title: str) -> dict[str, Any]:
    data = [{**{k: r[k] for k in ("p5", "p25", "p50", "p75", "p95", "n")}, "group": _cut(f"{r['model']} · {short(r['deploy'])}"),
             "deploy": r["deploy"]} for r in rows]
    y = {"field": "group", "type": "nominal", "sort": None, "title": None}
    return {"width": 300, "height": {"step": 24}, "data": {"values": data}, "layer": [
        {"mark": {"type": "rule", "color": "#666"},
         "encoding": {"y": y, "x": {"field": "p5", "type": "quantitative", "title": title}, "x2": {"field": "p95"}}},
        {"mark": {"type": "bar", "size": 14},
         "encoding": {"y": y, "x": {"field": "p25", "type": "quantitative"}, "x2": {"field": "p75"},
                      "color": {"field": "deploy", "type": "nominal", "legend": None}}},
        {"mark": {"type": "tick", "color": "black", "thickness": 2, "size": 14},
         "encoding": {"y": y, "x": {"field": "p50", "type": "quantitative"}}}]}


def cost_split(rows: list[Row]) -> dict[str, Any]:
    kinds = [k for k in COST_COLOURS if any(r["kind"] == k for r in rows)]
    return {"width": 300, "height": 220, "data": {"values": rows}, "mark": {"type": "bar", "width": {"band": 0.6}},
            "transform": [{"calculate": f"indexof({kinds!r}, datum.kind)", "as": "order"}],
            "encoding": {
                "x": {"field": "deploy", "type": "nominal", "sort": None, "axis": {"labelAngle": 0}},
                "y": {"field": "usd", "type": "quantitative", "stack": "zero", "title": "USD per 1,000 calls"},
                "order": {"field": "order"},
                "color": {"field": "kind", "type": "nominal", "title": None,
                          "scale": {"domain": kinds, "range": [COST_COLOURS[k] for k in kinds]}}}}


def pool_curve(points: Sequence[Mapping[str, object]], measured: float | None) -> dict[str, Any]:
    layers: list[dict[str, Any]] = [{
        "data": {"values": points}, "mark": {"type": "line", "point": True, "color": "#e8b931", "strokeWidth": 2},
        "encoding": {"x": {"field": "blocks", "type": "quantitative", "scale": {"type": "log"},
                           "title": "KV pool size (blocks, log scale)"},
                     "y": {"field": "hit", "type": "quantitative", "title": "replayed hit rate",
                           "axis": {"format": "%"}, "scale": {"domain": [0, 1]}}}}]
    if measured is not None:
        layers.append({"data": {"values": [{"hit": measured, "label": f"measured {measured:.1%}"}]},
                       "layer": [{"mark": {"type": "rule", "strokeDash": [4, 3], "color": "#444"},
                                  "encoding": {"y": {"field": "hit", "type": "quantitative"}}},
                                 {"mark": {"type": "text", "align": "left", "dy": -6, "x": 4, "fontSize": 11},
                                  "encoding": {"y": {"field": "hit", "type": "quantitative"},
                                               "text": {"field": "label"}}}]})
    return {"width": 300, "height": 200, "layer": layers}


def waterfall(sides: list[tuple[str, list[dict[str, object]]]], width: int = 420) -> dict[str, Any]:
    """Client and server side by side on one clock. Rows: label, phase, start and end (ms from the trace start),
    self_end (start + the stage's own time; the end when it records none). The faint envelope is drawn only
    where some stage's own time is shorter than its span: otherwise it would hide under the solid bar."""
    y = {"field": "label", "type": "nominal", "sort": None, "title": None,
         "axis": {"labelFontSize": 10, "grid": False}}
    colour = {"field": "phase", "type": "nominal", "legend": None,
              "scale": {"domain": [*PHASE_ORDER, "pass", "tool"],
                        "range": [*PHASE_COLOURS.values(), "#c5cbd3", "#3fbcbc"]}}
    x = {"field": "start", "type": "quantitative", "title": "ms since trace start"}
    views = []
    for title, rows in sides:
        solid = {"mark": {"type": "bar", "height": 9},
                 "encoding": {"y": y, "x": x, "x2": {"field": "self_end"}, "color": colour}}
        layers = [solid]
        if any(r["self_end"] != r["end"] for r in rows):
            layers.insert(0, {"mark": {"type": "bar", "opacity": 0.3, "height": 9},
                              "encoding": {"y": y, "x": x, "x2": {"field": "end"}, "color": colour}})
        views.append({"title": {"text": title, "fontSize": 12, "anchor": "start"}, "width": width,
                      "height": {"step": 13}, "data": {"values": rows}, "layer": layers})
    return {"hconcat": views, "spacing": 40, "resolve": {"scale": {"x": "shared", "color": "shared"}}}
