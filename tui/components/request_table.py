"""The request table widget: its columns, how a pass is drawn in a row, and the sort keys it sends up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from llmtrace.tui import format as fmt
from llmtrace.tui.data.records import RequestRow
from llmtrace.tui.keymap import bindings


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    widths: tuple[int, int, int]  # content width when narrow / normal / wide (0: left out); plus a gutter
    numeric: bool = False


# Below 100 columns the narrow widths apply; from 150 on the extra columns (service, cost, duration, trace).
NARROW, WIDE = 100, 150
COLUMNS: tuple[Column, ...] = (
    Column("time", "time", (8, 8, 8)),
    Column("service", "service", (0, 0, 14)),
    Column("model", "model", (14, 16, 18)),
    Column("replica", "replica", (0, 9, 10)),
    Column("deploy", "deploy", (6, 8, 10)),
    Column("prompt", "prompt", (6, 6, 7), True),
    Column("cached", "cached/hit", (10, 10, 11), True),
    Column("ttft", "TTFT", (6, 6, 7), True),
    Column("tpot", "TPOT", (6, 6, 7), True),
    Column("output", "out", (4, 5, 6), True),
    Column("finish", "finish", (9, 10, 12)),
    Column("duration", "took", (0, 0, 7), True),
    Column("cost", "cost", (0, 0, 10), True),
    Column("trace", "trace", (0, 0, 12)),
)


def tier(width: int) -> int:
    """0 narrow, 1 normal, 2 wide; an unknown width (0, before layout) counts as normal."""
    if width <= 0:
        return 1
    return 0 if width < NARROW else 2 if width >= WIDE else 1


# Columns whose content varies in length get the width the tier leaves over, in this order, up to what
# their longest loaded value needs (a trace id is 32 characters, model names run long).
FLEXIBLE = ("trace", "model", "service", "deploy", "finish", "replica")
SCROLLBAR = 2


def columns_for(width: int, rows: Sequence[RequestRow] = ()) -> list[tuple[Column, int]]:
    """(column, content width) pairs that fit a pane ``width`` columns wide, sharing what is left over
    among the columns whose values in ``rows`` would otherwise be cut."""
    t = tier(width)
    layout = [(c, c.widths[t]) for c in COLUMNS if c.widths[t] > 0]
    spare = width - sum(w + 1 for _, w in layout) - SCROLLBAR
    if width <= 0 or spare <= 0 or not rows:
        return layout
    widths = dict((c.key, w) for c, w in layout)
    need: dict[str, int] = {}
    for c, w in layout:
        if c.key in FLEXIBLE:
            need[c.key] = max(len(c.label) + 1, max(_cell(c, w, r).cell_len for r in rows[:200]))  # +1: sort arrow
            if need[c.key] < w:  # short values (replica r0, deploy v2) hand their room to long ones
                spare += w - need[c.key]
                widths[c.key] = need[c.key]
    for key in FLEXIBLE:
        if key in need and spare > 0:
            extra = min(spare, max(0, need[key] - widths[key]))
            widths[key] += extra
            spare -= extra
    return [(c, widths[c.key]) for c, _ in layout]


def row_cells(r: RequestRow, columns: list[tuple[Column, int]]) -> list[Text]:
    return [_fit(_cell(c, w, r), w, c.numeric) for c, w in columns]


class SortStep(Message):
    """o / O / i on the table: +1 next sort column, -1 previous, 0 reverse the direction."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step


class RequestTable(DataTable[Text]):
    """A DataTable with the request keys; sorting itself is the pane's job (it re-reads the store)."""

    BINDINGS = bindings("requests")

    def action_sort_next(self) -> None:
        self.post_message(SortStep(+1))

    def action_sort_previous(self) -> None:
        self.post_message(SortStep(-1))

    def action_sort_invert(self) -> None:
        self.post_message(SortStep(0))


def _fit(text: Text, width: int, numeric: bool) -> Text:
    """One space of gutter, then the content cut or padded to exactly ``width``."""
    if text.cell_len > width:
        text.truncate(width - 1)
        text.append("…")
    pad = " " * (width - text.cell_len)
    return Text(" ") + (Text(pad) + text if numeric else text + Text(pad))


def _cell(c: Column, width: int, r: RequestRow) -> Text:
    if c.key == "time":
        return Text(fmt.utc_time(r.start_ns))
    if c.key == "model":
        model = r.model or fmt.NONE
        side = {"client": "c ", "server": "s ", "app": "a "}.get(r.side or "", "")
        return Text(side, style="dim") + Text(model)
    if c.key == "replica":
        return Text(r.replica or fmt.NONE)
    if c.key == "deploy":
        return Text(r.deploy or fmt.NONE)
    if c.key == "prompt":
        return Text(fmt.count(r.prompt_tokens), justify="right")
    if c.key == "cached":
        hit = r.hit_ratio
        style = "" if hit is None else ("#87d787" if hit >= 0.5 else "#ffaf5f" if hit >= 0.1 else "#ff8787")
        return Text(fmt.count(r.cached_tokens) + " ") + Text(f"{fmt.pct(hit):>4}", style=style)
    if c.key == "ttft":
        return Text(fmt.ms(r.ttft_ms), justify="right")
    if c.key == "tpot":
        return Text(fmt.ms(r.tpot_ms), justify="right")
    if c.key == "output":
        return Text(fmt.count(r.output_tokens), justify="right")
    if c.key == "service":
        return Text(r.service or fmt.NONE)
    if c.key == "duration":
        return Text(fmt.ms(r.duration_ms))
    if c.key == "cost":
        return Text(fmt.usd(r.cost_usd))
    if c.key == "trace":
        return Text(r.trace_id, style="dim")
    if c.key == "finish":
        reason = r.finish_reason or (r.status if r.status and r.status != "ok" else fmt.NONE)
        style = "#ffaf5f" if reason in ("length", "content_filter") else ("bold #ff5f5f" if r.status == "error" else "")
        return Text(reason, style=style)
    raise ValueError(f"unknown column {c.key}")
