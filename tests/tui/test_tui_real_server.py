"""The explorer over a store written by the real server (`llmtrace serve --model tiny`), not by us."""

from __future__ import annotations

import io
import secrets
import time

import httpx
import pytest
from rich.console import Console
from textual.widgets import Static, TabbedContent

from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui.app import ExplorerApp
from llmtrace.tui.data.filter_expr import compile_filter
from llmtrace.tui.data.store_reader import StoreReader


@pytest.mark.slow
async def test_explorer_reads_what_the_real_server_recorded(tiny_server) -> None:  # type: ignore[no-untyped-def]
    trace_id = secrets.token_hex(16)
    async with httpx.AsyncClient(base_url=tiny_server.base_url, timeout=120) as client:
        for _ in range(2):  # the same prompt twice: the second pass can reuse the first one's prefix
            header = f"00-{trace_id}-{secrets.token_hex(8)}-01"
            r = await client.post("/v1/chat/completions", headers={"traceparent": header}, json={
                "model": "tiny", "messages": [{"role": "user", "content": "Where is my order 4417?"}],
                "max_tokens": 6, "temperature": 0})
            assert r.status_code == 200, r.text
    reader = StoreReader(tiny_server.db_path)
    flt = compile_filter(f"trace={trace_id}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the server's exporter flushes in the background
        try:
            if reader.request_page(flt).total == 2:
                break
        except StoreError:  # not created yet, or busy: the writer is another process
            pass
        time.sleep(0.3)
    assert reader.request_page(flt).total == 2, tiny_server.log()[-3000:]

    app = ExplorerApp(tiny_server.db_path, initial_filter=f"trace={trace_id}", analyze_after_s=None)
    app.animation_level = "none"
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(3):
            await pilot.pause()
            await app.workers.wait_for_complete()
        rows = app.requests.rows
        assert len(rows) == 2 and all(r.side == "server" and r.model == "tiny" for r in rows)
        assert all(r.prompt_tokens and r.output_tokens == 6 and r.ttft_ms and r.ttft_ms > 0 for r in rows)
        app.requests.table.focus()
        await pilot.press("enter")
        for _ in range(3):
            await pilot.pause()
            await app.workers.wait_for_complete()
        assert app.query_one(TabbedContent).active == "trace"
        waterfall = app.trace_pane.waterfall
        stages = [r.span.stage for r in waterfall.rows if r.kind == "stage"]
        assert {"intake.tokenization", "cache.prefix_match", "forward.decode", "gen.sampling"} <= set(stages)
        assert len([r for r in waterfall.rows if r.kind == "pass"]) == 2
        # every stage row the server wrote is explained from the registry
        index = next(i for i, r in enumerate(waterfall.rows) if r.span.stage == "cache.prefix_match")
        waterfall.highlighted = index
        await pilot.pause()
        body = app.trace_pane.query_one("#stage-body", Static).content
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(body)
        text = console.export_text()
        assert "Prefix match" in text or "prefix" in text.lower()
        assert "gen_ai.usage.cache_read.input_tokens" in text and "What goes wrong" in text
        # where the time goes: the pass's own bar from the time_breakdown view, and the selection's
        waterfall.highlighted = next(i for i, r in enumerate(waterfall.rows) if r.kind == "pass")
        await pilot.pause()
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(app.trace_pane.query_one("#stage-body", Static).content)
        text = console.export_text()
        assert "Where the time goes" in text and "Forward pass" in text, text[:2000]
        # stage rows: idle ones draw no bar and say so; an envelope shows its own time, not its length
        by_stage = {r.span.stage: r for r in waterfall.rows if r.kind == "stage"}
        width = waterfall.usable_width()
        moe = waterfall_row_text(by_stage["forward.moe_routing"], waterfall, width)
        assert moe.plain.rstrip().endswith("idle") and "█" not in moe.plain
        attention = by_stage["forward.attention"].span
        own = attention.attributes["llmtrace.stage.self_ms"]
        assert 0 < own <= attention.duration_ms
        assert waterfall_row_text(by_stage["forward.attention"], waterfall, width).plain.rstrip().endswith(
            fmt_ms(own))
        assert "where the time goes" in app.query_one("#requests-time", Static).content.plain


def waterfall_row_text(row, waterfall, width):  # type: ignore[no-untyped-def]
    from llmtrace.tui.components.waterfall import row_text

    trace = waterfall.trace
    return row_text(row, trace.start_ns, max(1, trace.end_ns - trace.start_ns), width)


def fmt_ms(value: float) -> str:
    from llmtrace.tui.format import ms

    return ms(value)
