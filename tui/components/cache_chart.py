"""A terminal chart of prefix-cache hit rate over time, with a marker where each deploy landed."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from llmtrace.tui import format as fmt
from llmtrace.tui.data.records import CacheBucket, CacheReport, DeployMark

EIGHTHS = " ▁▂▃▄▅▆▇█"
MARK_COLOUR = "#d787ff"
AXIS = 6  # "100% ┤"


def hit_colour(rate: float) -> str:
    return "#87d787" if rate >= 0.5 else "#ffd75f" if rate >= 0.2 else "#ff8787"


def columns(buckets: tuple[CacheBucket, ...], width: int) -> list[float | None]:
    """Merge the fine buckets into ``width`` columns; a column's rate weighs its passes by prompt tokens."""
    if not buckets or width <= 0:
        return []
    out: list[float | None] = []
    n = len(buckets)
    for c in range(width):
        lo, hi = c * n // width, max(c * n // width + 1, (c + 1) * n // width)
        prompt = sum(b.prompt_tokens for b in buckets[lo:hi])
        cached = sum(b.cached_tokens for b in buckets[lo:hi])
        out.append(cached / prompt if prompt > 0 else None)
    return out


def draw(report: CacheReport | None, width: int, height: int) -> Text:
    if report is None:
        return Text("loading …", style="dim")
    if not report.buckets or all(b.prompt_tokens == 0 for b in report.buckets):
        return Text("No passes with prompt tokens yet: nothing to chart.", style="dim")
    plot_w = max(10, width - AXIS - 1)
    plot_h = max(3, height - 2)
    t0, t1 = report.buckets[0].start_ns, report.buckets[-1].end_ns
    rates = columns(report.buckets, plot_w)
    marks = _mark_columns(report.deploys, t0, t1, plot_w)
    # Between passes the rate is what it last was: carry it forward (drawn dim) so sparse stores read
    # as a step line instead of isolated bars.
    carried: list[bool] = []
    last: float | None = None
    for i, rate in enumerate(rates):
        carried.append(rate is None and last is not None)
        if rate is None:
            rates[i] = last
        else:
            last = rate
    lines: list[Text] = []
    for y in range(plot_h):
        level = plot_h - 1 - y
        label = {0: "100%", plot_h // 2: " 50%", plot_h - 1: "  0%"}.get(y, "")
        line = Text(f"{label:>4} " + ("┤" if label else "│"), style="dim")
        for x, rate in enumerate(rates):
            if rate is None:
                cell, style = ("·", "dim") if level == 0 else (" ", "")
            else:
                eighths = max(1, round(rate * plot_h * 8)) - level * 8  # 0% still shows as a floor line
                cell = EIGHTHS[max(0, min(8, eighths))]
                style = hit_colour(rate) + (" dim" if carried[x] else "")
            if x in marks and cell == " ":
                cell, style = "┊", MARK_COLOUR
            line.append(cell, style=style)
        lines.append(line)
    axis = Text("     └", style="dim")
    axis.append("".join("┴" if x in marks else "─" for x in range(plot_w)), style="dim")
    lines.append(axis)
    lines.append(_labels(report, marks, t0, t1, plot_w))
    out = Text("\n").join(lines)
    return out


def _mark_columns(deploys: tuple[DeployMark, ...], t0: int, t1: int, width: int) -> dict[int, str]:
    out: dict[int, str] = {}
    span = max(1, t1 - t0)
    for m in deploys:
        if t0 <= m.at_ns <= t1:
            out[min(width - 1, int((m.at_ns - t0) / span * width))] = m.name
    return out


def _labels(report: CacheReport, marks: dict[int, str], t0: int, t1: int, width: int) -> Text:
    row = [" "] * width
    styles: list[str] = [""] * width

    def put(col: int, text: str, style: str) -> None:
        col = max(0, min(col, width - len(text)))
        if all(c == " " for c in row[max(0, col - 1) : col + len(text) + 1]):
            for i, ch in enumerate(text[:width]):
                row[col + i] = ch
                styles[col + i] = style

    for col, name in sorted(marks.items()):
        put(col, f"▲{name}", MARK_COLOUR)
    put(0, fmt.utc_time(t0), "dim")
    end = fmt.utc_time(t1)
    put(width - len(end), end, "dim")
    text = Text(" " * AXIS)
    for ch, style in zip(row, styles):
        text.append(ch, style=style)
    return text


class CacheChart(Widget):
    """Redraws itself at whatever size it is given; the data is fine-grained buckets from SQL."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.report: CacheReport | None = None

    def show(self, report: CacheReport | None) -> None:
        self.report = report
        self.refresh()

    def render(self) -> Text:
        return draw(self.report, self.size.width, self.size.height)
