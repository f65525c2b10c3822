"""The request list: one row per inference pass, a filter box, sort by any column, read a page at a time."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui.components.request_table import Column, RequestTable, SortStep, columns_for, row_cells
from llmtrace.tui.components.time_bar import OTHER, UNOBSERVED, WHOLE_CALL, phase_parts, time_bar
from llmtrace.tui.data.filter_expr import CompiledFilter, FilterError, compile_filter
from llmtrace.tui.data.records import RequestPage, RequestRow
from llmtrace.tui.data.store_reader import SORT_COLUMNS, StoreReader
from llmtrace.tui.messages import StoreProblem, TraceChosen

PAGE = 100
TEXT_SORTS = ("model", "replica", "deploy", "finish", "service", "trace")  # these sort A→Z first


EMPTY_STORE = (
    "This store has no inference passes yet.\n\n"
    "Record some: run `llmtrace demo`, or call llmtrace.init(db=...) in your app, "
    "or serve with `llmtrace serve --db ...`.\nWith --follow (key l) new passes appear here as they are written."
)


class RequestsPane(Vertical):
    """Owns the filter, the sort and the loaded rows; asks the store for one page at a time."""

    class PageLoaded(Message):
        def __init__(self, page: RequestPage, append: bool, generation: int, error: str | None = None) -> None:
            super().__init__()
            self.page = page
            self.append = append
            self.generation = generation
            self.error = error

    class SharesLoaded(Message):
        def __init__(self, shares: tuple[tuple[str, float], ...], generation: int,
                     whole_ms: float | None = None) -> None:
            super().__init__()
            self.shares = shares
            self.generation = generation
            self.whole_ms = whole_ms  # the median latency of the selection's calls that could not be split

    class FailureLoaded(Message):
        """Why the highlighted pass failed (read when a failed row is highlighted)."""

        def __init__(self, span_id: str, message: str | None) -> None:
            super().__init__()
            self.span_id = span_id
            self.message = message

    def __init__(self, reader: StoreReader, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.reader = reader
        self.filter: CompiledFilter = compile_filter("")
        self.sort = "time"
        self.descending = True
        self.rows: list[RequestRow] = []
        self.total = 0
        self.store_passes = 0
        self._generation = 0
        self._loading = False
        self._debounce: Timer | None = None
        self._layout: list[tuple[Column, int]] = []
        self._keep_span: str | None = None
        self.shares: tuple[tuple[str, float], ...] = ()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: ttft>2s  finish=length  deploy=v2  model~smol  (/ to focus, enter to apply)",
                    id="filter")
        yield Static("", id="requests-status")
        yield Static("", id="requests-time")
        yield Static("", id="requests-failure")
        table = RequestTable(id="requests-table", cursor_type="row", zebra_stripes=True, cell_padding=0)
        yield table
        yield Static(EMPTY_STORE, id="requests-empty")

    @property
    def table(self) -> RequestTable:
        return self.query_one(RequestTable)

    def on_mount(self) -> None:
        self._build_columns()
        self.reload()

    def on_resize(self) -> None:
        self._relayout(self.rows, keep_cursor=True)

    def visible_columns(self) -> list[tuple[Column, int]]:
        """(column, width) pairs shown now: they fit the pane and share its width by content."""
        return self._layout

    def _relayout(self, rows: list[RequestRow], keep_cursor: bool = False) -> bool:
        """Rebuild the columns when the pane's width or the loaded rows ask for another layout."""
        layout = columns_for(self.size.width, rows)
        if [(c.key, w) for c, w in layout] == [(c.key, w) for c, w in self._layout]:
            return False
        current = self.current()
        if keep_cursor and current is not None and self._keep_span is None:
            self._keep_span = current.span_id
        self._build_columns(layout)
        self._fill(rows)
        return True

    def _build_columns(self, layout: list[tuple[Column, int]] | None = None) -> None:
        if layout is not None:
            self._layout = layout
        elif not self._layout:
            self._layout = columns_for(self.size.width, self.rows)
        table = self.table
        table.clear(columns=True)
        for c, width in self._layout:
            arrow = ("▼" if self.descending else "▲") if c.key == self.sort else ""
            name = (c.label if len(c.label) + len(arrow) <= width else c.label[: width - len(arrow)]) + arrow
            label = Text(" " + (name.rjust(width) if c.numeric else name.ljust(width)), style="bold")
            table.add_column(label, key=c.key, width=width + 1)

    # -- loading -------------------------------------------------------------------------------------
    def reload(self, keep_cursor: bool = False) -> None:
        """Read the first page(s) again with the current filter and sort."""
        self._generation += 1
        if keep_cursor and self.rows and self.table.cursor_row < len(self.rows):
            self._keep_span = self.rows[self.table.cursor_row].span_id
        limit = max(PAGE, len(self.rows)) if keep_cursor else PAGE
        self._loading = True
        self._load(self.filter, self.sort, self.descending, 0, limit, False, self._generation)
        if not keep_cursor:  # a new selection: where its time goes (live polls keep the last answer)
            self._load_shares(self.filter, self._generation)

    @work(thread=True, exclusive=True, group="shares")
    def _load_shares(self, flt: CompiledFilter, generation: int) -> None:
        whole_ms = None
        try:
            shares = self.reader.selection_time_shares(flt)
            if any(k == WHOLE_CALL for k, _ in shares):
                whole_ms = self.reader.selection_whole_call_ms(flt)
        except StoreError:
            shares = ()
        self.post_message(self.SharesLoaded(shares, generation, whole_ms))

    @on(SharesLoaded)
    def _shares_loaded(self, message: SharesLoaded) -> None:
        if message.generation != self._generation:
            return
        self.shares = message.shares
        line = Text("where the time goes ", style="bold")
        line.append("(median share per pass)  ", style="dim")
        parts = phase_parts([(None if k in (UNOBSERVED, OTHER) else k, k, v) for k, v in message.shares])
        width = max(10, min(40, self.size.width // 3))
        bar = time_bar(parts, width, whole_ms=message.whole_ms)
        line.append_text(bar.split("\n")[0] if bar.plain else bar)
        if "\n" in bar.plain:
            line.append("  ")
            line.append_text(bar.split("\n")[1])
        self.query_one("#requests-time", Static).update(line if message.shares else Text(""))

    def _load_more(self) -> None:
        if self._loading or len(self.rows) >= self.total:
            return
        self._loading = True
        self._load(self.filter, self.sort, self.descending, len(self.rows), PAGE, True, self._generation)

    @work(thread=True, group="requests")
    def _load(self, flt: CompiledFilter, sort: str, desc: bool, offset: int, limit: int,
              append: bool, generation: int) -> None:
        try:
            page = self.reader.request_page(flt, sort, desc, offset, limit)
        except StoreError as exc:
            self.post_message(StoreProblem(str(exc)))
            self.post_message(self.PageLoaded(RequestPage((), 0, 0, 0), append, generation, str(exc)))
            return
        self.post_message(self.PageLoaded(page, append, generation))

    @on(PageLoaded)
    def _page_loaded(self, message: PageLoaded) -> None:
        if message.generation != self._generation:
            return  # an older query finished after a newer one started
        self._loading = False
        page = message.page
        self.total = page.total
        self.store_passes = page.store_passes
        if message.append:
            have = {r.span_id for r in self.rows}
            fresh = [r for r in page.rows if r.span_id not in have]  # live writes can shift pages
            if not self._relayout(self.rows + fresh, keep_cursor=True):
                for r in fresh:
                    self.rows.append(r)
                    self.table.add_row(*self._cells(r), key=r.span_id)
        elif not self._relayout(list(page.rows)):
            self._fill(list(page.rows))
        self._show_empty(message.error)
        self._update_status()

    def _fill(self, rows: list[RequestRow]) -> None:
        table = self.table
        keep = self._keep_span
        self._keep_span = None
        self.rows = rows
        table.clear()
        seen: set[str] = set()
        for r in rows:
            if r.span_id not in seen:
                seen.add(r.span_id)
                table.add_row(*self._cells(r), key=r.span_id)
        self.rows = [r for r in rows if r.span_id in seen]
        if keep is not None:
            for i, r in enumerate(rows):
                if r.span_id == keep:
                    table.move_cursor(row=i, animate=False)
                    break

    def _show_empty(self, failed: str | None) -> None:
        empty = self.query_one("#requests-empty", Static)
        no_passes = self.store_passes == 0
        empty.display = no_passes or failed is not None
        self.table.display = not empty.display
        if empty.display and not isinstance(self.app.focused, Input):
            # Hiding the table would hand focus to the filter box and swallow the single-key commands.
            self.app.set_focus(None)
        if failed:
            empty.update(f"{failed}\n\nPress ctrl+r to try again; in live mode (l) it is tried every second.")
        elif no_passes:
            empty.update(EMPTY_STORE)

    def _update_status(self, error: str | None = None) -> None:
        status = self.query_one("#requests-status", Static)
        text = Text()
        if error:
            text.append(error, style="bold red")
            status.update(text)
            return
        shown = len(self.rows)
        text.append(f"{shown:,} of {self.total:,} passes", style="bold")
        text.append(" (times UTC)", style="dim")
        if not self.filter.empty:
            text.append(f" matching {self.filter.text!r}", style="")
            text.append(f" ({self.store_passes:,} in store)", style="dim")
        arrow = "▼" if self.descending else "▲"
        text.append(f"  ·  sorted by {self.sort} {arrow}", style="dim")
        text.append("  ·  o sort  i reverse  enter open", style="dim")
        status.update(text)

    # -- cells ---------------------------------------------------------------------------------------
    def _cells(self, r: RequestRow) -> list[Text]:
        return row_cells(r, self.visible_columns())

    # -- filter --------------------------------------------------------------------------------------
    def set_filter(self, text: str) -> None:
        """Apply filter text now (also puts it in the box)."""
        box = self.query_one("#filter", Input)
        if box.value != text:
            box.value = text
        self._apply(text)

    def _apply(self, text: str) -> None:
        try:
            flt = compile_filter(text)
        except FilterError as exc:
            self.query_one("#filter", Input).add_class("-error")
            self._update_status(str(exc))
            return
        self.query_one("#filter", Input).remove_class("-error")
        if flt == self.filter:
            self._update_status()
            return
        self.filter = flt
        self.reload()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(0.4, lambda: self._apply(event.value))

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._apply(event.value)
        self.table.focus()

    # -- sort and selection --------------------------------------------------------------------------
    def sort_by(self, key: str, descending: bool | None = None) -> None:
        if key not in SORT_COLUMNS:
            raise ValueError(f"unknown sort column {key!r}")
        if descending is None:
            descending = not self.descending if key == self.sort else key not in TEXT_SORTS
        self.sort, self.descending = key, descending
        self._build_columns()
        self.reload()

    @on(DataTable.HeaderSelected, "#requests-table")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        self.sort_by(str(event.column_key.value))

    @on(SortStep)
    def _sort_step(self, event: SortStep) -> None:
        if event.step == 0:
            self.sort_by(self.sort, not self.descending)
            return
        keys = [c.key for c, _ in self.visible_columns()]
        i = keys.index(self.sort) if self.sort in keys else 0
        self.sort_by(keys[(i + event.step) % len(keys)])

    @on(DataTable.RowSelected, "#requests-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if 0 <= event.cursor_row < len(self.rows):
            r = self.rows[event.cursor_row]
            self.post_message(TraceChosen(r.trace_id, r.span_id))

    @on(DataTable.RowHighlighted, "#requests-table")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row >= len(self.rows) - 10:
            self._load_more()
        row = self.current()
        if row is not None and row.status == "error":
            self._load_failure(row.span_id)  # a failed call says why as soon as it is highlighted
        else:
            self.query_one("#requests-failure", Static).display = False

    @work(thread=True, exclusive=True, group="failure")
    def _load_failure(self, span_id: str) -> None:
        try:
            message = self.reader.status_message(span_id)
        except StoreError:
            message = None
        self.post_message(self.FailureLoaded(span_id, message))

    @on(FailureLoaded)
    def _failure_loaded(self, message: FailureLoaded) -> None:
        row = self.current()
        line = self.query_one("#requests-failure", Static)
        line.display = row is not None and row.span_id == message.span_id
        if line.display:
            text = Text("failed: ", style="bold #ff5f5f")
            text.append(message.message or "no message recorded", style="#ff5f5f")
            text.append("  (enter opens the trace)", style="dim")
            line.update(text)

    def current(self) -> RequestRow | None:
        i = self.table.cursor_row
        return self.rows[i] if 0 <= i < len(self.rows) else None
