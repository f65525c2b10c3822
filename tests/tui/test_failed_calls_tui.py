"""The explorer over calls made to ``llmtrace serve`` with the real OpenAI SDK through ``instrument()``: a failed call
(404, unknown model) says why under its trace's header, and a buffered (non-streaming) call draws its stream set-up
and prefix match, which a client sees only as the wait for the first byte, as not observed, with the where-the-time-
goes bar saying "the whole call (not split)" and its latency instead of "unobserved 100%". Textual's pilot."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from rich.console import Console
from testkit import RunningServer
from textual.pilot import Pilot
from textual.widgets import Static

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.tui.app import ExplorerApp
from llmtrace.tui.components.waterfall import row_text

MSGS = [{"role": "user", "content": "Where is my parcel?"}]
UNKNOWN = "gpt-4o-mini-not-served"


@pytest.fixture(scope="module")
def failed_store(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    db = tmp_path_factory.mktemp("failed-tui") / "app.duckdb"
    llmtrace.init(db=db, service_name="parcel-desk", capture="hashes", strict=True)
    try:
        client = instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="sk-unused", max_retries=0))
        client.chat.completions.create(model="tiny", max_tokens=24, messages=MSGS)  # buffered: headers come last
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=UNKNOWN, messages=MSGS)
    finally:
        llmtrace.shutdown()
    yield db


async def settle(pilot: Pilot) -> None:
    for _ in range(2):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def plain(app: ExplorerApp, selector: str) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(app.query_one(selector, Static).content)
    return console.export_text()


async def open_row(pilot: Pilot, app: ExplorerApp, status: str) -> None:
    await pilot.press("r")
    await settle(pilot)
    index = next(i for i, r in enumerate(app.requests.rows) if r.status == status)
    app.requests.table.move_cursor(row=index, animate=False)
    await pilot.pause()
    await pilot.press("enter")
    await settle(pilot)


async def test_a_failed_call_says_why(failed_store: Path) -> None:
    app = ExplorerApp(failed_store, analyze_after_s=None)  # type: ignore[arg-type]
    app.animation_level = "none"
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        # in the request list: the finish column says error, the line above the table says why
        failed = next(i for i, r in enumerate(app.requests.rows) if r.status == "error")
        ok = next(i for i, r in enumerate(app.requests.rows) if r.status == "ok")
        app.requests.table.move_cursor(row=ok, animate=False)
        await settle(pilot)
        assert not app.query_one("#requests-failure", Static).display
        app.requests.table.move_cursor(row=failed, animate=False)
        await settle(pilot)
        assert app.query_one("#requests-failure", Static).display
        assert f"failed: HTTP 404: The model '{UNKNOWN}' does not exist" in plain(app, "#requests-failure")
        await open_row(pilot, app, "error")
        error = plain(app, "#trace-error")
        assert f"failed: HTTP 404: The model '{UNKNOWN}' does not exist" in error and "error.type 404" in error
        body = plain(app, "#stage-body")  # the pass is highlighted first: its header carries the message too
        assert "error" in body and "does not exist" in body
        await open_row(pilot, app, "ok")
        assert not app.query_one("#trace-error", Static).display  # a call that did not fail says nothing


async def test_a_buffered_call_draws_no_stage_as_the_whole_wait(failed_store: Path) -> None:
    app = ExplorerApp(failed_store, analyze_after_s=None)  # type: ignore[arg-type]
    app.animation_level = "none"
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await open_row(pilot, app, "ok")
        waterfall = app.trace_pane.waterfall
        trace = waterfall.trace
        assert trace is not None
        total = max(1, trace.end_ns - trace.start_ns)
        waits = [r for r in waterfall.rows if r.span.stage in ("arrival.stream_setup", "cache.prefix_match")]
        assert {r.span.stage for r in waits} == {"arrival.stream_setup", "cache.prefix_match"}
        for row in waits:
            assert row.span.end_ns - row.span.start_ns > 0.5 * total  # the wait is most of the call...
            drawn = row_text(row, trace.start_ns, total, 120).plain
            assert "█" not in drawn and "unseen" in drawn, drawn  # ...and is not drawn as the stage's time
            assert not row.time_observed
        connection = next(r for r in waterfall.rows if r.span.stage == "arrival.connection")
        assert connection.time_observed  # what the client did time stays solid
        # the pass (highlighted first): one piece, the whole call, with its latency
        body = plain(app, "#stage-body")
        assert re.search(r"the whole call \(not split\) [\d.]+m?s", body) and "unobserved" not in body, body
        # the stream set-up's own pane says what its length is
        index = waterfall.rows.index(next(r for r in waits if r.span.stage == "arrival.stream_setup"))
        for _ in range(index - (waterfall.highlighted or 0)):
            await pilot.press("down")
        await pilot.pause()
        assert "time not observed" in plain(app, "#stage-body")
        # the request list's where-the-time-goes bar over both calls: the whole call, with the median latency
        await pilot.press("r")
        await settle(pilot)
        assert re.search(r"the whole call \(not split\) [\d.]+m?s", plain(app, "#requests-time"))
