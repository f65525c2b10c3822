"""What the report says, read from the HTML the CLI wrote: capture mode respected, ``--service`` keeps one app,
the cost split and the pool replay computed right, the charting extra named when it is missing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from adapters_fake_provider import Script, fake_provider, sse
from report_helpers import copy_store, diagnose, write_report

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.tracer import recording as rec
from llmtrace.tracer.storage.store import read_store

# Words, not digits: a number like "5521" turns up in hashes and timestamps of any page by chance (CI saw it once).
SECRET_PROMPT = "Ticket QUOKKA-WALTZ: the PURPLE-ELEPHANT invoice is wrong"
SECRET_OUTPUT = "Refund MAGENTA-TIGER issued"


def _chunk(content: str | None = None, finish: str | None = None) -> dict[str, object]:
    delta = {"content": content} if content is not None else {}
    return {"id": "c1", "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _record_call(db: Path, capture: str) -> None:
    """One streamed chat call through the real OpenAI SDK, instrumented, against a scripted loopback endpoint."""
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(content_type="text/event-stream",
                                                    chunks=sse(_chunk(SECRET_OUTPUT), _chunk(None, "stop")))
        llmtrace.init(db=db, capture=capture, service_name="helpdesk", deploy="h1", strict=True)
        try:
            client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))
            for _ in client.chat.completions.create(model="gpt-4o-mini", stream=True, messages=[
                    {"role": "system", "content": "You answer tickets."}, {"role": "user", "content": SECRET_PROMPT}]):
                pass
            llmtrace.force_flush()
        finally:
            llmtrace.shutdown()


@pytest.mark.parametrize("capture", ["hashes", "full"])
def test_prompt_text_appears_only_when_captured_in_full(capture: str, tmp_path: Path) -> None:
    db = tmp_path / "helpdesk.duckdb"
    _record_call(db, capture)
    out = tmp_path / "report.html"
    assert write_report(["report", "--db", str(db), "-o", str(out)]) == 0
    html = out.read_text()
    assert 'data-trace="' in html  # the call has its trace page either way (the slowest trace)
    if capture == "full":  # the page quotes what the store kept, so the hashes case below can fail
        assert "PURPLE-ELEPHANT" in html and "MAGENTA-TIGER" in html
        assert "prompt text: stored (capture full)" in html
    else:
        assert "PURPLE-ELEPHANT" not in html and "MAGENTA-TIGER" not in html and "QUOKKA-WALTZ" not in html
        assert "Prompt text not stored" in html


def test_service_keeps_one_app(support_db: Path, tmp_path: Path) -> None:
    db = copy_store(support_db, tmp_path / "two-apps.duckdb")
    llmtrace.init(db=db, service_name="billing-app", deploy="b7", strict=True)
    try:
        for _ in range(3):
            with rec.start_pass("gpt-4o-mini", side="client", attributes={
                    "gen_ai.usage.input_tokens": 500, "gen_ai.usage.cache_read.input_tokens": 0,
                    "gen_ai.usage.output_tokens": 20, "llmtrace.ttft_ms": 900.0, "llmtrace.meters.cost_usd": 1e-4}):
                pass
    finally:
        llmtrace.shutdown()
    with read_store(db) as conn:
        billing = {r[0] for r in conn.execute("SELECT trace_id FROM spans WHERE service = 'billing-app'").fetchall()}
    both, one = tmp_path / "both.html", tmp_path / "one.html"
    assert write_report(["report", "--db", str(db), "-o", str(both)]) == 0
    assert write_report(["report", "--db", str(db), "--service", "support-app", "-o", str(one)]) == 0
    every, only = both.read_text(), one.read_text()
    assert "b7" in _deploy_cells(every) and "b7" not in _deploy_cells(only)
    assert _deploy_cells(only) == ["v1", "v2"]
    assert "16 passes in 8 traces" in only and "19 passes in 11 traces" in every
    assert not any(t in only for t in billing)


def _deploy_cells(html: str) -> list[str]:
    cache = html[html.index('id="cache"'):html.index('id="time"')]
    return re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">[\d,]+</td>", cache)


def test_cost_split_recovers_the_synthetic_prices(synthetic_db: Path) -> None:
    # synthetic_store prices uncached input 0.15, cached 0.015 and output 0.6 USD per million tokens
    from llmtrace.report import costs
    from llmtrace.report.data import ReportData

    with read_store(synthetic_db) as conn:
        data = ReportData(conn).open()
        try:
            sums = data.cost_sums()
        finally:
            data.close()
    prices = costs.fit_prices({k: sum(float(s[k] or 0) for s in sums) for k in sums[0] if k not in ("model", "deploy")})
    assert prices is not None and prices.r2 is not None and prices.r2 > 0.9999
    assert [round(p * 1e6, 6) for p in prices.per_token] == [0.15, 0.015, 0.6]
    rows, _ = costs.by_deploy(sums)
    for r in rows:  # the parts add up to what was recorded
        assert r.split and sum(r.per_1k.values()) == pytest.approx(r.recorded_per_1k, rel=1e-6)


def test_cost_split_in_the_page(support_html: Path, support_db: Path) -> None:
    # tui_store prices uncached input at 2e-7 and output at 8e-7 USD per token; cached input is free
    with read_store(support_db) as conn:
        want = {d: (1000 * u * 2e-7, 1000 * o * 8e-7) for d, u, o in conn.execute(
            "SELECT deploy, avg(prompt_tokens - cached_tokens), avg(output_tokens) FROM requests "
            "WHERE side = 'client' GROUP BY deploy").fetchall()}
    html = support_html.read_text()
    cost = html[html.index('id="cost"'):html.index('id="kv-pool"')]
    got = {m[0]: (float(m[1]), float(m[2]), float(m[3])) for m in re.findall(
        r"<tr><td>(v\d)</td><td class=\"num\">\d+</td><td class=\"num\">\$([\d.]+)</td>"
        r"<td class=\"num\">\$([\d.]+)</td><td class=\"num\">\$([\d.]+)</td>", cost)}
    assert set(got) == {"v1", "v2"}
    for d, (uncached, cached, output) in got.items():
        assert uncached == pytest.approx(want[d][0], abs=1e-4) and cached == pytest.approx(0, abs=1e-4)
        assert output == pytest.approx(want[d][1], abs=1e-4)


def test_pool_replay_evicts_leaves_before_their_prefix() -> None:
    from llmtrace.report.kvpool import _hit_rate, replay

    chains = [("r0", ["a", "b"], 32, 0), ("r0", ["a", "b"], 32, 32)]
    assert _hit_rate(chains, 2) == 0.5  # the second pass finds both blocks
    assert _hit_rate(chains, 1) == 0.25  # one block left: the root, so the second pass still hits one
    assert _hit_rate([("r0", ["a"], 16, 0), ("r1", ["a"], 16, 0)], 4) == 0.0  # replicas do not share a pool
    curve = replay(chains)
    assert curve is not None and curve.measured_hit_rate == 0.5 and curve.points[-1].hit_rate == 0.5


def test_pool_chart_with_eviction_records_and_why_absent_without(synthetic_html: Path, support_html: Path) -> None:
    synthetic, support = synthetic_html.read_text(), support_html.read_text()
    assert 'data-chart="kv-pool"' in synthetic and "blocks evicted" in synthetic
    assert 'data-chart="kv-pool"' not in support
    assert 'data-chart-absent="kv-pool"' in support and "No eviction records (cache.eviction spans)" in support


def test_missing_charting_extra_is_named_and_the_core_still_imports(support_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    code = ("import sys; sys.modules['vl_convert'] = None\n"  # as if vl-convert-python were not installed
            "import llmtrace.report, llmtrace.report.charts as c\n"
            "assert not c.available()\n"
            "from llmtrace.cli import main\n"
            f"sys.exit(main(['report', '--db', {str(support_db)!r}, '-o', {str(out)!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install 'llmtrace-stages[report]'" in r.stderr and not out.exists()
    # The gate still gives its verdict (exit 1: v2 broke the cache) and says why there is no page.
    check = code.replace(f"['report', '--db', {str(support_db)!r}, '-o', {str(out)!r}]",
                         f"['check', '--db', {str(support_db)!r}, '--deploy', 'v2', '--baseline-deploy', 'v1', "
                         f"'--html', {str(out)!r}]")
    r = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "FAIL cache hit rate" in r.stdout and "no HTML report" in r.stderr and not out.exists()


def test_bad_arguments_are_clear_errors(support_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert write_report(["report", "--db", str(tmp_path / "none.duckdb"), "-o", str(tmp_path / "x.html")]) == 2
    assert "no store at" in capsys.readouterr().err
    assert write_report(["report", "--db", str(support_db), "--since", "yesterday", "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmtrace report: ") and "--since" in err and "yesterday" in err
    assert write_report(["report", "--db", str(support_db), "-o", str(tmp_path / "no" / "x.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_findings_carry_their_evidence(support_html: Path, support_db: Path) -> None:
    html = support_html.read_text()
    for i, f in enumerate(diagnose(support_db)):
        card = html[html.index(f'id="finding-{i + 1}"'):]
        card = card[:card.index("</div>")]
        assert json.dumps(f["title"])[1:-1].replace("'", "&#x27;") in card
        for ev in f["evidence"]:
            assert ev["label"].replace("'", "&#x27;") in card


def test_a_store_without_the_time_views_still_shows_where_the_time_goes(support_db: Path, tmp_path: Path) -> None:
    import duckdb

    db = copy_store(support_db, tmp_path / "old.duckdb")
    conn = duckdb.connect(str(db))  # what a store written before the time views looks like
    conn.execute("DROP VIEW IF EXISTS time_breakdown")
    conn.execute("DROP VIEW IF EXISTS ttft_breakdown")
    conn.close()
    out = tmp_path / "old.html"
    assert write_report(["report", "--db", str(db), "-o", str(out)]) == 0
    html = out.read_text()
    time_section = html[html.index('id="time"'):html.index('id="latency"')]
    assert 'data-chart="phase-share"' in time_section and 'data-chart="ttft-parts"' in time_section
    assert "Source: stage span durations" in time_section and "Source: server stage values" in time_section
    assert "time_breakdown view" not in time_section


def test_the_time_views_are_used_where_the_store_has_them(support_html: Path, support_db: Path) -> None:
    with read_store(support_db) as conn:
        views = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "time_breakdown" not in views:
        pytest.skip("this version's stores have no time_breakdown view (tracer/storage/time_views.py)")
    html = support_html.read_text()
    time_section = html[html.index('id="time"'):html.index('id="latency"')]
    assert "Source: time_breakdown view, server passes" in time_section
    assert "Source: ttft_breakdown view (server passes" in time_section


def test_check_html_against_a_baseline_file(support_db: Path, tmp_path: Path) -> None:
    baseline, out = tmp_path / "baseline.json", tmp_path / "check.html"
    assert write_report(["check", "--db", str(support_db), "--deploy", "v1", "--save-baseline", str(baseline)]) == 0
    assert not out.exists()
    rc = write_report(["check", "--db", str(support_db), "--deploy", "v2", "--baseline", str(baseline),
                       "--html", str(out)])
    assert rc == 1  # the gate's verdict does not depend on the page
    html = out.read_text()
    regression = html[html.index('id="regression"'):html.index('id="findings"')]
    assert f"baseline: baseline {baseline}" in regression and "candidate: deploy v2" in regression
    assert '<tr data-verdict="cache_hit_rate"><td>cache hit rate</td><td class="num">82.6%</td>' \
           '<td class="num">0.0%</td>' in regression
    assert 'class="fail">FAIL<' in regression


def test_a_parquet_export_gives_the_same_report(support_db: Path, support_html: Path, tmp_path: Path) -> None:
    export = tmp_path / "export"
    assert write_report(["export", "--parquet", str(export), "--db", str(support_db)]) == 0
    out = tmp_path / "fleet.html"
    assert write_report(["report", "--parquet", f"{export}/**/*.parquet", "-o", str(out)]) == 0
    fleet, local = out.read_text(), support_html.read_text()
    assert "16 passes in 8 traces" in fleet
    assert fleet.count('class="card finding') == local.count('class="card finding') > 0
    assert re.findall(r'data-trace="([0-9a-f]+)"', fleet) == re.findall(r'data-trace="([0-9a-f]+)"', local)


def test_since_keeps_the_window(support_db: Path, tmp_path: Path) -> None:
    from tui_store import BASE_NS, MS

    out, empty = tmp_path / "since.html", tmp_path / "empty.html"
    after_v1 = BASE_NS + 4 * 20_000 * MS - 1000 * MS  # the support store's v2 traces start at the fifth
    assert write_report(["report", "--db", str(support_db), "--since", str(after_v1), "-o", str(out)]) == 0
    assert _deploy_cells(out.read_text()) == ["v2"]
    assert write_report(["report", "--db", str(support_db), "--since", "1h", "-o", str(empty)]) == 0
    html = empty.read_text()  # long before now: nothing in the window, and the page says so
    assert "0 passes in 0 traces" in html and "No pass reports prompt tokens" in html and "data-chart=" not in html


def test_waterfall_draws_self_time_solid_and_the_envelope_faint() -> None:
    from types import MappingProxyType

    from llmtrace.report import charts
    from llmtrace.report.data import Span
    from llmtrace.report.traces import layout, waterfall_rows

    ms = 1_000_000

    def span(sid: str, parent: str | None, stage: str | None, start: int, end: int, **attrs: object) -> Span:
        return Span(sid, parent, stage or "chat m", "chat" if stage is None else None, stage,
                    stage.split(".")[0] if stage else None, "s", None, start * ms, end * ms, "ok",
                    attributes=MappingProxyType(attrs))

    spans = [span("p", None, None, 0, 100, **{"llmtrace.side": "server"}),
             span("a", "p", "forward.attention", 10, 100, **{"llmtrace.stage.self_ms": 40.0}),  # an envelope
             span("q", "p", "forward.prefill", 10, 30)]  # no self time: its span is its time
    view = layout("t1", spans)
    assert view is not None and not view.client and [r.span.span_id for r in view.server] == ["p", "a", "q"]  # pipeline order at one instant
    rows = {r["label"].split()[-1]: r for r in waterfall_rows(view, view.server)}
    assert (rows["forward.attention"]["end"], rows["forward.attention"]["self_end"]) == (100.0, 50.0)
    assert rows["forward.prefill"]["self_end"] == rows["forward.prefill"]["end"] == 30.0
    spec = charts.waterfall([("server side", waterfall_rows(view, view.server))])
    layers = spec["hconcat"][0]["layer"]
    assert [layer["mark"].get("opacity") for layer in layers] == [0.3, None]  # faint envelope under the solid
    no_self = charts.waterfall([("server side", waterfall_rows(view, (view.server[0], view.server[2])))])
    assert len(no_self["hconcat"][0]["layer"]) == 1  # nothing to show faint: one solid layer


def test_names_from_the_store_are_escaped(support_db: Path, tmp_path: Path) -> None:
    import duckdb

    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    db = copy_store(support_db, tmp_path / "evil.duckdb")
    conn = duckdb.connect(str(db))  # a deploy and a service name are whatever the app set
    conn.execute("UPDATE spans SET deploy = ? WHERE deploy = 'v2'", [evil])
    conn.execute("UPDATE deploys SET name = ?, note = ? WHERE name = 'v2'", [evil, evil])
    conn.close()
    out = tmp_path / "evil.html"
    assert write_report(["report", "--db", str(db), "-o", str(out)]) == 0
    html = out.read_text()
    assert "<script" not in html and "<img" not in html and "onerror=alert(1)>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html  # shown, as text
