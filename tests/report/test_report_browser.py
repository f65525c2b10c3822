"""The report opened in a real headless Chromium: every chart drawn, nothing printed to the console, nothing
fetched from outside the file, a click from a finding lands on its trace page, and the layout keeps its
shape (sections in order, links that resolve, two sides per trace, no horizontal overflow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cdp import Browser
from report_helpers import copy_store, diagnose, write_report

SECTIONS = ["findings", "cache", "time", "latency", "cost", "kv-pool", "traces"]

# Per chart: its SVG, its drawn size, and how many data marks (bars, lines, points, rules, ticks) it holds.
CHART_STATE = """[...document.querySelectorAll('[data-chart]')].map(el => {
    const svg = el.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    // data marks only (Vega tags them role-mark); axes, grids and legends do not count
    const marks = svg ? svg.querySelectorAll('g[class*="role-mark"] > path, g[class*="role-mark"] > line').length : 0;
    return {name: el.dataset.chart, w: r.width, h: r.height, marks: marks}; })"""


def _open(browser: Browser, html: Path) -> None:
    browser.errors.clear()
    browser.requests.clear()
    browser.open(html.as_uri())


@pytest.mark.parametrize("which", ["support_html", "regression_html", "synthetic_html"])
def test_every_chart_renders_without_console_errors_or_network(which: str, chromium: Browser, shots: Path,
                                                              request: pytest.FixtureRequest) -> None:
    html: Path = request.getfixturevalue(which)
    _open(chromium, html)
    charts = chromium.js(CHART_STATE)
    names = {c["name"] for c in charts}
    assert {"hit-rate-timeline", "hit-rate-by-deploy", "phase-share", "ttft_ms-distribution", "tpot_ms-distribution",
            "cost-split", "waterfall"} <= names, names
    empty = [c for c in charts if c["w"] < 50 or c["h"] < 30 or c["marks"] < 1]
    assert not empty, empty
    assert chromium.errors == []
    outside = [u for u in chromium.requests if not u.startswith(("file:", "data:", "about:"))]
    assert outside == [], outside
    shot = chromium.screenshot(shots / f"{which}.png", full_page=which == "support_html")  # one long page is enough
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few kilobytes


def test_clicking_a_finding_trace_link_opens_that_trace_page(support_html: Path, chromium: Browser,
                                                            shots: Path) -> None:
    _open(chromium, support_html)
    href = chromium.js("document.querySelector('.finding a.tr').getAttribute('href')")
    assert href.startswith("#trace-")
    chromium.click(".finding a.tr")
    target = chromium.js("""(() => { const t = document.querySelector(':target');
        return t && {hash: location.hash, cls: t.className, trace: t.dataset.trace,
                     top: t.getBoundingClientRect().top, sides: t.querySelectorAll('.sides > div').length,
                     charts: t.querySelectorAll('[data-chart=waterfall] svg').length,
                     titles: [...t.querySelectorAll('[data-chart=waterfall] svg text')].map(x => x.textContent)
                             .filter(x => x.endsWith(')'))}; })()""")
    assert target is not None, "the click did not navigate to an element"
    assert target["hash"] == href and "trace" in target["cls"] and href == f"#trace-{target['trace']}"
    assert 0 <= target["top"] < 120  # scrolled to the top, just under the sticky navigation
    assert target["sides"] == 2 and target["charts"] == 1  # client and server side by side, one clock
    assert target["titles"] == ["client side (what the app saw)", "server side (the engine)"]
    chromium.screenshot(shots / "trace_page.png")


def test_layout_sections_links_and_width(support_html: Path, chromium: Browser) -> None:
    _open(chromium, support_html)
    state = chromium.js("""(() => ({
        sections: [...document.querySelectorAll('main > section.block')].map(s => s.id),
        toc: [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href')),
        broken: [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href'))
                  .filter(h => !document.getElementById(decodeURIComponent(h.slice(1)))),
        external: [...document.querySelectorAll('[src], link[href], a[href]')]
                  .map(e => e.getAttribute('src') || e.getAttribute('href')).filter(u => /^(https?:)?\\/\\//.test(u)),
        scripts: document.querySelectorAll('script').length,
        overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
        findings: document.querySelectorAll('.finding').length,
        traces: [...document.querySelectorAll('.trace')].map(t => t.dataset.trace),
        navSticky: getComputedStyle(document.querySelector('nav.toc')).position,
    }))()""")
    assert state["sections"] == SECTIONS
    assert state["toc"] == [f"#{s}" for s in SECTIONS]
    assert state["broken"] == [] and state["external"] == [] and state["scripts"] == 0
    assert state["overflow"] <= 0, "the page scrolls sideways at 1280 px"
    assert state["navSticky"] == "sticky"
    # The page shows what `llmtrace diagnose` finds, no more and no fewer.
    assert state["findings"] == len(diagnose(support_html.with_name("support.duckdb")))
    assert state["traces"] and len(set(state["traces"])) == len(state["traces"])


def test_regression_report_puts_the_verdicts_first(regression_html: Path, chromium: Browser) -> None:
    _open(chromium, regression_html)
    state = chromium.js("""(() => ({
        first: document.querySelector('main > section.block').id,
        verdicts: Object.fromEntries([...document.querySelectorAll('[data-verdict]')]
                  .map(r => [r.dataset.verdict, r.querySelector('td:nth-child(5)').textContent])),
        explained: document.querySelector('[data-verdict=cache_hit_rate] a[href^="#finding-"]')?.getAttribute('href'),
        sides: [...document.querySelectorAll('#regression .grid .card h3')].map(h => h.textContent),
        deployRows: [...document.querySelectorAll('#cache table tr td:first-child')].map(t => t.textContent),
    }))()""")
    assert state["first"] == "regression"
    assert state["verdicts"] == {"cache_hit_rate": "FAIL", "ttft_p50_ms": "FAIL", "ttft_p95_ms": "FAIL",
                                 "cost_per_request_usd": "FAIL"}
    assert state["explained"] and chromium.js(f"!!document.querySelector('{state['explained']}')")
    assert state["sides"] == ["baseline: deploy v1", "candidate: deploy v2"]
    assert state["explained"] == "#finding-1"  # the finding that explains the failure leads the page
    assert state["deployRows"] == ["v1", "v2"]


def test_layout_snapshot_cards_and_columns(support_html: Path, chromium: Browser) -> None:
    """A DOM snapshot of the page's shape: the cards of each section, and what sits side by side."""
    _open(chromium, support_html)
    state = chromium.js("""(() => {
        const box = el => { const r = el.getBoundingClientRect(); return [Math.round(r.left), Math.round(r.top),
                                                                           Math.round(r.width)]; };
        const cards = {};
        for (const s of document.querySelectorAll('main > section.block'))
            if (s.id !== 'findings' && s.id !== 'traces')
                cards[s.id] = [...s.querySelectorAll(':scope > .card > h3, :scope > .grid > .card > h3')]
                              .map(h => h.textContent);
        const lat = [...document.querySelectorAll('#latency .grid > .card')].map(box);
        const sides = [...document.querySelector('.trace .sides').children].map(box);
        return {cards, lat, sides, main: box(document.querySelector('main'))};
    })()""")
    assert state["cards"] == {
        "cache": ["Over time, with deploys marked", "By deploy"],
        "time": ["Time share per phase", "TTFT decomposed"],
        "latency": ["TTFT per model and deploy", "TPOT per model and deploy"],
        "cost": ["By deploy"],
        "kv-pool": ["KV pool"],
    }
    (l1, t1, w1), (l2, t2, w2) = state["lat"]
    assert t1 == t2 and l2 > l1 + w1 - 1 and abs(w1 - w2) <= 2  # two equal columns, one row
    (sl1, st1, sw1), (sl2, st2, sw2) = state["sides"]
    assert st1 == st2 and sl2 >= sl1 + sw1 and abs(sw1 - sw2) <= 2  # client | server
    assert state["main"][2] <= 1180  # the page keeps its reading width


def test_commit_sized_deploy_names_keep_the_charts_inside_their_cards(support_db: Path, tmp_path: Path,
                                                                      chromium: Browser) -> None:
    import duckdb

    sha = "3f9c2a71be0d4e5f8a6b7c8d9e0f1a2b3c4d5e6f"  # CI marks deploys with the commit (docs/ci.md)
    db = copy_store(support_db, tmp_path / "sha.duckdb")
    conn = duckdb.connect(str(db))
    conn.execute("UPDATE spans SET deploy = ? WHERE deploy = 'v2'", [sha])
    conn.execute("UPDATE deploys SET name = ? WHERE name = 'v2'", [sha])
    conn.close()
    out = tmp_path / "sha.html"
    assert write_report(["report", "--db", str(db), "-o", str(out)]) == 0
    assert sha in out.read_text()  # the tables keep the full name
    _open(chromium, out)
    outside = chromium.js("""[...document.querySelectorAll('[data-chart] svg')].filter(svg => {
        const c = svg.closest('.card').getBoundingClientRect(), r = svg.getBoundingClientRect();
        return r.right > c.right + 1 || r.left < c.left - 1; }).map(svg => svg.closest('[data-chart]').dataset.chart)""")
    assert outside == []
    assert chromium.js("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
    texts = chromium.js("[...document.querySelectorAll('[data-chart] svg text')].map(t => t.textContent)")
    assert not [t for t in texts if sha in t]  # no axis or legend tries to hold 40 characters
    assert any(t.startswith(sha[:12]) for t in texts) and max(map(len, texts)) <= 45
    assert chromium.errors == []
