"""The hand-drawn parts at fixed widths: the cache chart, the waterfall rows and time axis."""

from __future__ import annotations

from pathlib import Path

from llmtrace.tui.components.cache_chart import AXIS, columns, draw
from llmtrace.tui.components.waterfall import DURATION_WIDTH, geometry, row_text, ruler
from llmtrace.tui.data.records import CacheBucket, CacheReport, DeployMark
from llmtrace.tui.data.store_reader import StoreReader
from llmtrace.tui.data.waterfall_model import build_rows


def _report(rates: list[float | None], deploy_at: int | None) -> CacheReport:
    buckets = tuple(CacheBucket(i * 10, i * 10 + 10, 1 if r is not None else 0, 100 if r is not None else 0,
                                int((r or 0) * 100)) for i, r in enumerate(rates))
    marks = (DeployMark("v2", deploy_at, None),) if deploy_at is not None else ()
    return CacheReport(buckets, marks, ())


def test_chart_marks_the_deploy_where_it_happened_and_carries_gaps() -> None:
    rates: list[float | None] = [0.9] * 10 + [None] * 5 + [0.0] * 25  # 40 buckets of 10 ns
    text = draw(_report(rates, deploy_at=150), width=AXIS + 1 + 40, height=10).plain.splitlines()
    assert len(text) == 10
    axis, labels = text[-2], text[-1]
    assert axis.index("┴") - axis.index("└") - 1 == 15  # the deploy at 150 ns of 400 sits in column 15
    assert "▲v2" in labels
    top = text[0][AXIS:]
    assert top[:10] == "▂" * 10 and text[1][AXIS:AXIS + 10] == "█" * 10  # 90% of 8 rows: 7.2 rows of bar
    bottom = text[-3][AXIS:]
    assert bottom[10:15] == "█" * 5  # the gap carries the last rate forward
    assert set(bottom[16:40]) == {"▁"}  # 0% still draws a floor


def test_columns_weigh_by_prompt_tokens() -> None:
    buckets = (CacheBucket(0, 1, 1, 100, 100), CacheBucket(1, 2, 1, 300, 0))
    assert columns(buckets, 1) == [0.25]
    assert columns(buckets, 2) == [1.0, 0.0]


def test_empty_chart_says_so() -> None:
    assert "nothing to chart" in draw(CacheReport((), (), ()), 60, 10).plain


def test_waterfall_rows_fit_their_width_and_place_bars_in_time(support_store: Path) -> None:
    reader = StoreReader(support_store)
    trace = reader.trace(_first_trace(reader))
    rows = build_rows(trace)
    t0, total = trace.start_ns, trace.end_ns - trace.start_ns
    for width in (60, 78, 158):
        label_w, bar_w = geometry(width)
        assert label_w + bar_w + DURATION_WIDTH + 1 == width
        for row in rows:
            text = row_text(row, t0, total, width)
            assert text.cell_len == width, (width, text.plain)
        assert ruler(width, total).cell_len == width
    root = row_text(rows[0], t0, total, 100)
    label_w, bar_w = geometry(100)
    assert root.plain[label_w:label_w + bar_w].strip("─") == ""  # the agent span covers the whole axis
    last_stage = row_text(rows[-1], t0, total, 100).plain[label_w:label_w + bar_w]
    assert last_stage.rstrip().endswith("█") and len(last_stage.rstrip()) > bar_w * 0.9  # it ends the trace


def _first_trace(reader: StoreReader) -> str:
    from llmtrace.tui.data.filter_expr import compile_filter

    return reader.request_page(compile_filter(""), sort="time", descending=False, limit=1).rows[0].trace_id
