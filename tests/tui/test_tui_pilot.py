"""Textual's pilot drives every pane and key of the explorer over a store recorded from real passes."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static, TabbedContent

from llmtrace.tui.app import ExplorerApp
from llmtrace.tui.components.cache_chart import CacheChart
from llmtrace.tui.components.help_screen import HelpScreen
from llmtrace.tui.components.stage_pane import StagePane
from llmtrace.tui.components.symptom_search import SymptomSearch
from llmtrace.tui.keymap import KEYS

TESTS_TUI = Path(__file__).resolve().parent


async def settle(pilot: Pilot, rounds: int = 2) -> None:
    """Let workers finish and their messages land."""
    for _ in range(rounds):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def text_of(app: ExplorerApp, selector: str, width: int = 200) -> str:
    """What a Static shows, as plain text (rich renderables rendered at ``width``)."""
    return plain(app.query_one(selector, Static).content, width)


def plain(renderable: object, width: int = 200) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def app_for(path: Path, **kw: object) -> ExplorerApp:
    kw.setdefault("analyze_after_s", None)
    app = ExplorerApp(path, **kw)  # type: ignore[arg-type]
    app.animation_level = "none"
    return app


async def test_first_screen_lists_passes_newest_first(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        pane = app.requests
        assert pane.total == 32 and len(pane.rows) == 32
        starts = [r.start_ns for r in pane.rows]
        assert starts == sorted(starts, reverse=True)
        table = app.query_one("#requests-table", DataTable)
        assert [str(k.value) for k in table.columns] == ["time", "model", "replica", "deploy", "prompt", "cached",
                                                         "ttft", "tpot", "output", "finish"]
        assert "32 of 32 passes" in text_of(app, "#requests-status")
        assert app.query_one(TabbedContent).active == "requests"
        assert app.focused is table


async def test_wide_terminal_adds_service_cost_and_trace(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(170, 40)) as pilot:
        await settle(pilot)
        table = app.query_one("#requests-table", DataTable)
        keys = [str(k.value) for k in table.columns]
        assert {"service", "cost", "duration", "trace"} <= set(keys)
        row = [str(c) for c in table.get_row_at(0)]
        first = app.requests.rows[0]
        assert first.trace_id[:10] in row[keys.index("trace")] and "support-app" in row[keys.index("service")]


async def test_narrow_terminal_drops_replica_column(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.query_one("#requests-table", DataTable)
        keys = [str(k.value) for k in table.columns]
        assert "replica" not in keys and "finish" in keys
        assert sum(c.width for c in table.columns.values()) <= 78  # fits beside the scrollbar


async def test_sort_keys_and_header_click(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("o")  # next column: model
        await settle(pilot)
        assert app.requests.sort == "model"
        await pilot.press("O", "O")  # back past time to the last column
        await settle(pilot)
        assert app.requests.sort == "finish" and app.requests.descending is False  # text sorts A→Z first
        reasons = [r.finish_reason for r in app.requests.rows]
        assert reasons == sorted(reasons)
        await pilot.press("i")
        await settle(pilot)
        assert app.requests.sort == "finish" and app.requests.descending is True
        reasons = [r.finish_reason for r in app.requests.rows]
        assert reasons == sorted(reasons, reverse=True)
        # a mouse click on the TTFT header sorts by it, slowest first
        table = app.query_one("#requests-table", DataTable)
        x = sum(c.width for c in list(table.columns.values())[:6]) + 2
        await pilot.click("#requests-table", offset=(x, 0))
        await settle(pilot)
        assert app.requests.sort == "ttft" and app.requests.descending is True
        ttfts = [r.ttft_ms for r in app.requests.rows]
        assert ttfts == sorted(ttfts, reverse=True)


async def test_filter_box_expressions_and_errors(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        assert isinstance(app.focused, Input) and app.focused.id == "filter"
        await pilot.press(*"ttft>2s", "enter")  # nothing is that slow
        await settle(pilot)
        assert app.requests.total == 0
        box = app.query_one("#filter", Input)
        box.value = "finish=length"  # typing each key is slow under the pilot; enter is what applies
        await pilot.press("slash", "enter")
        await settle(pilot)
        assert app.requests.total == 4 and {r.finish_reason for r in app.requests.rows} == {"length"}
        assert "matching" in text_of(app, "#requests-status")
        box.value = "deploy=v2 ttft>1.5s"
        await pilot.press("slash", "enter")
        await settle(pilot)
        assert app.requests.total == 8 and all(r.deploy == "v2" and r.ttft_ms > 1500 for r in app.requests.rows)
        box.value = "ttft>soon"
        await pilot.press("slash", "enter")
        await settle(pilot)
        assert box.has_class("-error") and "not like 2s" in text_of(app, "#requests-status")
        assert app.requests.total == 8  # a bad filter keeps the last good result
        await pilot.press("slash", "escape")  # esc only leaves the box: the last good filter stays
        await settle(pilot)
        assert app.requests.total == 8 and app.focused is app.requests.table
        await pilot.press("escape")  # a second esc, in the table, clears it
        await settle(pilot)
        assert app.requests.total == 32 and box.value == ""
        await pilot.press("slash", *"hit<5%")  # typing alone applies it after a short pause
        await pilot.pause(0.8)
        await settle(pilot)
        assert app.requests.total == 16 and all(r.hit_ratio == 0 for r in app.requests.rows)


async def test_enter_opens_waterfall_and_stage_pane_explains(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chosen = app.requests.rows[0]
        await pilot.press("enter")
        await settle(pilot)
        assert app.query_one(TabbedContent).active == "trace"
        waterfall = app.trace_pane.waterfall
        assert waterfall.trace is not None and waterfall.trace.trace_id == chosen.trace_id
        assert waterfall.current_row().span.span_id == chosen.span_id  # the pass we picked is selected
        header = text_of(app, "#trace-header")
        assert chosen.trace_id in header and "4 passes · 2 tools" in header
        assert "0" in text_of(app, "#trace-ruler")
        stage_pane = app.query_one(StagePane)
        assert stage_pane.span is not None and stage_pane.span.span_id == chosen.span_id
        # walk down to the prefill stage: its registry meaning and what goes wrong are shown
        prefill = next(i for i, r in enumerate(waterfall.rows) if r.span.stage == "forward.prefill"
                       and i > waterfall.highlighted)
        for _ in range(prefill - waterfall.highlighted):
            await pilot.press("down")
        await pilot.pause()
        body = text_of(app, "#stage-body")
        assert "Prefill" in body and "llmtrace.prefill.tokens" in body and "What goes wrong" in body
        assert "prompt tokens computed" in body  # the registry's one-line meaning
        assert "tokens" in body  # unit
        # the mouse works in the waterfall too: click the first tool row
        tool = next(i for i, r in enumerate(waterfall.rows) if r.kind == "tool")
        waterfall.scroll_to(y=max(0, tool - 2), animate=False)
        await pilot.pause()
        await pilot.click("#waterfall", offset=(5, tool - int(waterfall.scroll_y)))
        await pilot.pause()
        assert waterfall.highlighted == tool
        assert "Tool dispatch" in text_of(app, "#stage-body") and "gen_ai.tool.name" in text_of(app, "#stage-body")
        await pilot.press("escape")
        assert app.query_one(TabbedContent).active == "requests"


async def test_phase_keys_filter_waterfall_and_click_phase_bar(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        waterfall = app.trace_pane.waterfall
        full = len(waterfall.rows)
        await pilot.press("3")
        await pilot.pause()
        assert app.phases == {"cache"}
        stages = {r.span.stage for r in waterfall.rows if r.kind == "stage"}
        assert stages == {"cache.prefix_match"} and len(waterfall.rows) < full
        await pilot.press("4")
        await pilot.pause()
        assert app.phases == {"cache", "forward"}
        assert {r.phase for r in waterfall.rows if r.kind == "stage"} == {"cache", "forward"}
        await pilot.press("0")
        await pilot.pause()
        assert app.phases == frozenset() and len(waterfall.rows) == full
        # the phase bar is clickable: find where "8 Meters" is drawn and click it
        bar = app.query_one("#phase-bar")
        text = bar.render().plain  # type: ignore[union-attr]
        await pilot.click("#phase-bar", offset=(text.index("8 Meters") + 1, 0))
        await pilot.pause()
        assert app.phases == {"meters"}
        assert [r.span.stage for r in waterfall.rows if r.kind == "stage"] == ["meters.cache_accounting"]
        for key in "1245678":
            await pilot.press(key)
        await pilot.pause()
        assert len(app.phases) == 6 and "meters" not in app.phases


@pytest.mark.slow
async def test_findings_pane_links_to_traces(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot, rounds=3)
        findings = app.findings
        assert findings.loaded and findings.findings, "the analyzers found nothing in a store with a cache-breaking deploy"
        symptoms = {f.symptom for f in findings.findings}
        assert {"cost_after_deploy", "broken_json"} & symptoms
        first = findings.current()
        assert first is not None and first.title in text_of(app, "#finding-body")
        # phase filter narrows the list too
        await pilot.press("7")
        await pilot.pause()
        assert all(f.phase == "safety" for f in findings.shown)
        await pilot.press("0")
        await pilot.pause()
        # t lists the finding's traces in the request table
        app.query_one("#findings-list").focus()
        await pilot.press("t")
        await settle(pilot)
        assert app.query_one(TabbedContent).active == "requests"
        assert app.requests.filter.text.startswith("trace=")
        assert {r.trace_id for r in app.requests.rows} <= set(first.trace_ids) and app.requests.rows
        # enter on a finding opens its first trace in the waterfall
        await pilot.press("f")
        await pilot.press("enter")
        await settle(pilot)
        assert app.query_one(TabbedContent).active == "trace"
        assert app.trace_pane.trace_id == first.trace_ids[0]


@pytest.mark.slow
async def test_symptom_search_jumps_to_matching_findings(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, SymptomSearch)
        await pilot.press(*"json")
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot, rounds=3)
        assert app.query_one(TabbedContent).active == "findings"
        assert app.findings.symptom is not None and app.findings.symptom.id == "broken_json"
        assert app.findings.shown and all(f.symptom == "broken_json" for f in app.findings.shown)
        assert "Broken or half-written JSON" in text_of(app, "#findings-header")
        # a symptom with nothing behind it says where to look instead
        await pilot.press("s")
        await pilot.pause()
        app.screen.query_one("#symptom-input", Input).value = "emoji mangled"
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        body = text_of(app, "#finding-body")
        assert "No finding for" in body and "Phases to open" in body
        await pilot.press("escape")  # clears the symptom
        await pilot.pause()
        assert app.findings.symptom is None
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SymptomSearch)


async def test_cache_view_chart_and_cost_by_deploy(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        chart = app.query_one(CacheChart)
        drawn = chart.render().plain
        assert "▲v2" in drawn and "100%" in drawn and "█" in drawn
        costs = app.query_one("#cost-table", DataTable)
        assert costs.row_count == 2
        v1 = [str(c) for c in costs.get_row("v1")]
        v2 = [str(c) for c in costs.get_row("v2")]
        assert v2[2].strip() == "0%" and v1[2].strip() not in ("0%", "—")
        assert v1[5].startswith("$") and v2[5].startswith("$")


async def test_help_screen_lists_every_key(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        shown = " ".join(plain(s.content) for s in app.screen.query(Static))
        for key in KEYS:
            if key.key.isdigit():
                continue
            assert key.description in shown, key
        assert "1–8" in shown and "ttft" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.slow
async def test_tabs_keys_reload_follow_toggle_and_quit(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        tabs = app.query_one(TabbedContent)
        for key, tab in (("w", "trace"), ("f", "findings"), ("c", "cache"), ("r", "requests")):
            await pilot.press(key)
            assert tabs.active == tab
        # the tab bar answers the mouse too
        await pilot.click("#tabs Tab#--content-tab-cache")
        await pilot.pause()
        assert tabs.active == "cache"
        await pilot.press("r", "down", "down")
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert app.query_one("#requests-table", DataTable).cursor_row == 2  # reload keeps your place
        assert app.follow is False
        await pilot.press("l")
        await settle(pilot)
        assert app.follow is True and "live" in text_of(app, "#topbar")
        await pilot.press("l")
        assert app.follow is False
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_mouse_click_on_a_row_opens_its_trace(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        third = app.requests.rows[2]
        await pilot.click("#requests-table", offset=(3, 3))  # header is row 0
        await pilot.click("#requests-table", offset=(3, 3))
        await settle(pilot)
        assert app.trace_pane.trace_id == third.trace_id


async def test_empty_store_says_what_to_do(empty_store_path: Path) -> None:
    app = app_for(empty_store_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        message = app.query_one("#requests-empty", Static)
        assert message.display and "no inference passes yet" in text_of(app, "#requests-empty")
        assert "llmtrace demo" in text_of(app, "#requests-empty")
        assert not app.query_one("#requests-table").display
        await pilot.press("c")
        await settle(pilot)
        assert "nothing to chart" in app.query_one(CacheChart).render().plain


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import llmtrace
    from tui_store import _agent_trace, BASE_NS, MS
    llmtrace.init(db={db!r}, service_name="support-app", deploy="v3", strict=True)
    for i in range(3):
        _agent_trace(BASE_NS + (100 + i) * 20_000 * MS, 100 + i, deploy_broke_cache=False)
        llmtrace.force_flush()
    llmtrace.shutdown()
""")


@pytest.mark.slow
async def test_follow_mode_shows_passes_another_process_writes(support_store: Path) -> None:
    app = app_for(support_store, follow=True, poll_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.requests.total == 32
        writer = subprocess.Popen([sys.executable, "-c", WRITER.format(tests=str(TESTS_TUI), db=str(support_store))])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and app.requests.total < 44:
            await pilot.pause(0.2)
        assert writer.wait(timeout=60) == 0
        await settle(pilot)
        assert app.requests.total == 44  # 3 new traces × 4 passes, while we kept reading
        assert app.requests.rows[0].deploy == "v3"  # newest first: the new passes are at the top
        assert "44 passes" in text_of(app, "#topbar")


async def test_follow_mode_waits_for_a_store_that_does_not_exist_yet(tmp_path: Path) -> None:
    path = tmp_path / "later.duckdb"
    app = app_for(path, follow=True, poll_s=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert "no store at" in text_of(app, "#requests-empty") and "live mode" in text_of(app, "#requests-empty")
        assert not app._notifications  # waiting is expected in live mode: no error toast
        # Another process creates the store (in this one, DuckDB refuses a writer beside our reader).
        code = f"import sys; sys.path.insert(0, {str(TESTS_TUI)!r}); from pathlib import Path; " \
               f"from tui_store import record_support_store; record_support_store(Path({str(path)!r}), 2)"
        writer = await asyncio.create_subprocess_exec(sys.executable, "-c", code)
        assert await asyncio.wait_for(writer.wait(), 60) == 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and app.requests.total < 8:
            await pilot.pause(0.2)
        await settle(pilot)
        assert app.requests.total == 8 and app.query_one("#requests-table").display


async def test_vim_keys_move_the_cursor_in_every_list(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        table = app.requests.table
        assert table.cursor_row == 0
        await pilot.press("j", "j", "j")
        assert table.cursor_row == 3
        await pilot.press("k")
        assert table.cursor_row == 2
        await pilot.press("G")
        assert table.cursor_row == len(app.requests.rows) - 1
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("ctrl+d")
        half = table.cursor_row
        assert 5 <= half < len(app.requests.rows)
        await pilot.press("ctrl+u")
        assert table.cursor_row == 0
        await pilot.press("enter")  # the waterfall is an option list: the same keys
        await settle(pilot)
        waterfall = app.trace_pane.waterfall
        start = waterfall.highlighted or 0
        await pilot.press("j", "j")
        assert waterfall.highlighted == start + 2
        await pilot.press("G")
        assert waterfall.highlighted == waterfall.option_count - 1
        await pilot.press("g")
        assert waterfall.highlighted == 0


async def test_y_copies_the_trace_id_under_the_cursor(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        await pilot.press("j", "y")
        assert app.clipboard == app.requests.rows[1].trace_id
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("y")
        assert app.clipboard == app.trace_pane.trace_id == app.requests.rows[1].trace_id


async def test_columns_share_a_wide_terminal_so_ids_and_models_are_whole(support_store: Path) -> None:
    app = app_for(support_store)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        widths = {c.key: w for c, w in app.requests.visible_columns()}
        used = sum(w + 1 for w in widths.values())
        assert widths["trace"] >= 32, widths  # a whole W3C trace id
        longest_model = max(len(r.model or "") for r in app.requests.rows) + 2  # side marker "c "
        assert widths["model"] >= min(longest_model, 40), widths
        assert used <= 200
        row = app.requests.table.get_row_at(0)
        trace_cell = row[list(widths).index("trace")]
        assert app.requests.rows[0].trace_id in trace_cell.plain and "…" not in trace_cell.plain
    async with app_for(support_store).run_test(size=(80, 30)) as pilot:  # narrow: the tier's widths, no overflow
        await settle(pilot)
        assert sum(w + 1 for _, w in pilot.app.requests.visible_columns()) <= 80


async def test_terminal_escapes_in_the_store_are_shown_not_obeyed(support_store: Path) -> None:
    # Any OTLP sender names its own spans and services: an OSC title change or a cursor move in one must
    # reach the screen as visible text, never as a control sequence.
    from llmtrace.tracer.storage.store import write_connection

    evil = "app\x1b]0;pwned\x07\x1b[2J"
    with write_connection(support_store) as conn:
        conn.execute("UPDATE spans SET service = ?, name = 'chat ' || ? WHERE trace_id = "
                     "(SELECT trace_id FROM spans ORDER BY start_ns DESC LIMIT 1)", [evil, evil])
    app = app_for(support_store)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        row = app.requests.rows[0]
        assert row.service == "app\\x1b]0;pwned\\x07\\x1b[2J"
        cells = "".join(c.plain for c in app.requests.table.get_row_at(0))
        assert "\x1b" not in cells and "\x07" not in cells and "\\x1b" in cells
        await pilot.press("enter")
        await settle(pilot)
        names = [s.name for s in app.trace_pane.trace.spans]
        assert any("\\x1b]0;pwned" in n for n in names) and not any("\x1b" in n for n in names)
        screen = app.export_screenshot()
        assert "pwned" in screen and "\x1b]0;" not in screen


async def test_service_and_since_flags_become_filter_terms(support_store: Path) -> None:
    import argparse

    from llmtrace.tui.cli import add_arguments, initial_filter

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = initial_filter(parser.parse_args(["--service", "support-app", "--since", "3650d"]))
    assert text == "service=support-app since=3650d"
    async with app_for(support_store, initial_filter=text).run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert pilot.app.requests.total == 32
    for flags in (["--service", "another-app"], ["--since", "2026-11-18T11:08"]):
        text = initial_filter(parser.parse_args(flags))
        async with app_for(support_store, initial_filter=text).run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            rows = pilot.app.requests.rows
            if flags[0] == "--service":
                assert pilot.app.requests.total == 0
            else:  # the store's passes run from 11:06:40 to 11:09 UTC that day: only the later ones
                assert 0 < pilot.app.requests.total < 32
                assert min(r.start_ns for r in rows) >= 1_795_000_000_000_000_000 + 80 * 10**9
    assert initial_filter(parser.parse_args(["--since", "yesterday-ish"])) is None
