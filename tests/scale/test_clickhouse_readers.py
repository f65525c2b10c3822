"""``llmtrace explore`` and ``llmtrace report`` over a ClickHouse store: the explorer's and the report's DuckDB SQL
run inside ClickHouse's engine (chdb, in-process) through the analyzers' transpiler, over the exporter's
``otel_traces`` filled from the same spans as a DuckDB store, and show the same rows, findings and tables."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb")  # in the dev extra; a checkout without it cannot run ClickHouse at all

from textual.widgets import DataTable, Static  # noqa: E402

from llmtrace.cli import main  # noqa: E402
from llmtrace.report.data import ReportData, Selection  # noqa: E402
from llmtrace.tracer.storage.clickhouse import connect  # noqa: E402
from llmtrace.tracer.storage.store import read_store  # noqa: E402
from llmtrace.tui.app import ExplorerApp  # noqa: E402
from llmtrace.tui.components.cache_chart import CacheChart  # noqa: E402
from llmtrace.tui.data.filter_expr import compile_filter  # noqa: E402
from llmtrace.tui.data.store_reader import StoreReader  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from chdb_store import synthetic_pair  # noqa: E402


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db, folder = synthetic_pair(tmp_path_factory.mktemp("chr"), passes=120, seed=3)
    return db, f"chdb://{folder}"


def _finding_key(f: Any) -> tuple:
    # which five traces a finding quotes may differ (several analyzers quote rows of a query without ORDER BY)
    return (f.symptom, f.stage, f.title, f.summary, len(f.trace_ids),
            tuple((e.label, str(e.value), e.unit, str(e.baseline)) for e in f.evidence))


@dataclasses.dataclass(frozen=True)
class _Num:
    """A float equal to another within 1e-9 relative: the engines' last bits of a sum or division differ."""
    v: float

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Num) and math.isclose(self.v, other.v, rel_tol=1e-9, abs_tol=1e-9)

    def __hash__(self) -> int:
        return 0

    def __lt__(self, other: _Num) -> bool:
        return self.v < other.v


def _round(v: Any) -> Any:
    """Values as compared: dataclasses as dicts, floats as _Num."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _round({f.name: getattr(v, f.name) for f in dataclasses.fields(v)})
    if isinstance(v, float):
        return _Num(v)
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_round(x) for x in v]
    return v


def test_store_reader_reads_the_same_screens_on_clickhouse(stores: tuple[Path, str]) -> None:
    db, url = stores
    duck, ch = StoreReader(db), StoreReader(url)
    try:
        assert ch.check() == duck.check() and ch.check().passes > 0
        for text in ("", "deploy=v2", "ttft>500ms"):
            flt = compile_filter(text)
            for sort in ("time", "ttft", "hit"):
                want = duck.request_page(flt, sort=sort, limit=25)
                assert _round(ch.request_page(flt, sort=sort, limit=25)) == _round(want) and want.rows, (text, sort)
        page = duck.request_page(compile_filter(""), limit=3)
        for row in page.rows:
            got, want_trace = ch.trace(row.trace_id), duck.trace(row.trace_id)
            assert _round(got.spans) == _round(want_trace.spans) and len(want_trace.spans) > 5
            # the stage pane sums a pass's breakdown by phase: its rows' order is the engine's
            assert {k: sorted(_round(v), key=str) for k, v in got.breakdown.items()} == {
                k: sorted(_round(v), key=str) for k, v in want_trace.breakdown.items()} != {}
        assert _round(ch.selection_time_shares(compile_filter(""))) == _round(
            duck.selection_time_shares(compile_filter("")))
        assert _round(ch.cache_report(buckets=40)) == _round(duck.cache_report(buckets=40))
        ids = ["0" * 32, page.rows[1].trace_id]
        assert ch.first_trace_of(ids) == duck.first_trace_of(ids) == page.rows[1].trace_id
    finally:
        ch.close()
    # the explorer's "temporary" tables are Memory tables on ClickHouse: none is left behind
    with connect(url) as conn:
        left = conn.execute("SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'Memory'")
        assert left.fetchall() == []


def _text(app: ExplorerApp, selector: str) -> str:
    return str(app.query_one(selector, Static).content)


async def _screens(target: Path | str) -> dict[str, Any]:
    """What the explorer shows: the request table, a trace's waterfall, the findings and the cache view."""
    app = ExplorerApp(target, analyze_after_s=None)
    app.animation_level = "none"
    seen: dict[str, Any] = {}
    async with app.run_test(size=(170, 48)) as pilot:
        for _ in range(3):
            await pilot.pause()
            await app.workers.wait_for_complete()
        table = app.query_one("#requests-table", DataTable)
        seen["rows"] = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        seen["status"] = _text(app, "#requests-status")
        await pilot.press("enter")
        for _ in range(3):
            await pilot.pause()
            await app.workers.wait_for_complete()
        wf = app.trace_pane.waterfall
        seen["waterfall"] = [(r.kind, r.span.span_id, r.span.stage) for r in wf.rows]
        seen["header"] = re.sub(r"\s+", " ", _text(app, "#trace-header"))
        await pilot.press("f")
        for _ in range(4):
            await pilot.pause()
            await app.workers.wait_for_complete()
        seen["findings"] = sorted(_finding_key(f) for f in app.findings.findings)
        seen["failures"] = getattr(app.findings, "failures", ())
        await pilot.press("c")
        for _ in range(3):
            await pilot.pause()
            await app.workers.wait_for_complete()
        seen["chart"] = app.query_one(CacheChart).render().plain
        costs = app.query_one("#cost-table", DataTable)
        seen["costs"] = [[str(c) for c in costs.get_row_at(i)] for i in range(costs.row_count)]
    return seen


@pytest.mark.slow
async def test_explorer_pilot_over_clickhouse_shows_what_duckdb_shows(stores: tuple[Path, str]) -> None:
    db, url = stores
    want = await _screens(db)
    got = await _screens(url)
    assert want["rows"] and len(want["waterfall"]) > 5 and len(want["findings"]) >= 5 and want["costs"]
    assert "█" in want["chart"]
    for key in want:
        assert got[key] == want[key], key


def test_explore_cli_takes_store_and_env(stores: tuple[Path, str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # the checks the command makes before the UI starts: a ClickHouse URL is opened, a bad one is a sentence
    assert main(["explore", "--store", "clickhouse://127.0.0.1:9/db"]) == 2
    assert "ClickHouse" in capsys.readouterr().err
    monkeypatch.setenv("LLMTRACE_STORE", "clickhouse://127.0.0.1:9/db")
    assert main(["explore"]) == 2 and "ClickHouse" in capsys.readouterr().err
    started: list[object] = []
    monkeypatch.setattr(ExplorerApp, "run", lambda self, *a, **k: started.append(self.db))
    monkeypatch.setenv("LLMTRACE_STORE", stores[1])
    assert main(["explore"]) == 0 and started == [stores[1]]  # the URL, not a path folded from it
    assert main(["explore", str(stores[0])]) == 0 and started[-1] == stores[0]  # a DB given wins over the env


def test_report_on_clickhouse_has_the_findings_and_tables_of_duckdb(stores: tuple[Path, str], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db, url = stores
    tables: list[dict[str, Any]] = []
    for kw in ({"db": db}, {"db": None, "store": url}):
        with read_store(**kw) as conn:  # type: ignore[arg-type]
            data = ReportData(conn, Selection()).open()
            try:
                seen = {m: _round(getattr(data, m)()) for m in (
                    "summary", "hit_rate_timeline", "deploy_marks", "by_deploy", "cost_sums", "phase_time",
                    "ttft_parts", "mean_ttft", "eviction_summary", "block_chains")}
                seen["ttft"] = _round(data.latency_quantiles("ttft_ms"))
                ids = sorted(data.sample_traces(n=3))
                seen["passes"] = _round(data.pass_rows(ids))
                seen["spans"] = {t: [(s.span_id, s.start_ns, dict(s.attributes)) for s in v]
                                 for t, v in data.traces(ids).items()}
            finally:
                data.close()
        tables.append(seen)
    assert tables[0]["summary"]["passes"] > 0 and tables[0]["phase_time"][0] and tables[0]["spans"]
    for key in tables[0]:
        assert tables[1][key] == tables[0][key], key
    # the command: the same findings on the page (counted in its line), the store named in the header
    lines = []
    for where, name in ((["--db", str(db)], "duck.html"), (["--store", url], "ch.html")):
        assert main(["report", *where, "--max-traces", "3", "-o", str(tmp_path / name)]) == 0
        lines.append(re.sub(r"\([\d.]+ MB|in [\d.]+s", "", capsys.readouterr().out.replace(name, "")))
    assert lines[0] == lines[1] and " 0 findings" not in lines[0]
    html = (tmp_path / "ch.html").read_text()
    assert url in html
    findings = [re.findall(r'<h3><span class="rank">#\d+</span> (.*?)</h3>', (tmp_path / n).read_text()) for n in ("duck.html", "ch.html")]
    assert findings[0] and findings[0] == findings[1]
