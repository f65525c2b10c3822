"""The explorer app: lays out the panes, routes their messages, owns the phase filter and live mode.

Widgets never call each other; they post messages (``messages.py``) that the app turns into calls on
the pane that should react. Every store read happens in a worker thread inside a pane.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Footer, Input, OptionList, Static, TabbedContent, TabPane

from llmtrace.tracer.storage.store import StoreError, is_clickhouse_url
from llmtrace.tui.components.cache_view import CacheView
from llmtrace.tui.components.findings_pane import FindingsPane
from llmtrace.tui.components.help_screen import HelpScreen
from llmtrace.tui.components.phase_bar import PhaseBar
from llmtrace.tui.components.requests_pane import RequestsPane
from llmtrace.tui.components.symptom_search import SymptomSearch
from llmtrace.tui.components.trace_pane import TracePane
from llmtrace.tui.data.records import StoreStamp
from llmtrace.tui.data.store_reader import StoreReader
from llmtrace.tui.keymap import bindings
from llmtrace.tui.messages import PhaseToggled, ShowTraces, StoreProblem, TraceChosen

TABS = ("requests", "trace", "findings", "cache")
FINDINGS_EVERY_S = 10.0


class ExplorerApp(App[None]):
    CSS_PATH = "explorer.tcss"
    TITLE = "llmtrace explore"
    BINDINGS = bindings("app")

    phases: reactive[frozenset[str]] = reactive(frozenset())
    follow: reactive[bool] = reactive(False)

    class StampRead(Message):
        def __init__(self, stamp: StoreStamp | None, error: str | None) -> None:
            super().__init__()
            self.stamp = stamp
            self.error = error

    def __init__(self, db: str | os.PathLike[str], *, follow: bool = False, poll_s: float = 1.0,
                 initial_filter: str = "", analyze_after_s: float | None = 1.0) -> None:
        super().__init__()
        if poll_s <= 0:
            raise ValueError("poll_s must be positive")
        # a ClickHouse store URL stays text (a Path would fold its "//"); tui/data/store_reader.py reads both
        self.db: Path | str = str(db) if is_clickhouse_url(db) else Path(db)
        self.reader = StoreReader(self.db)
        self.poll_s = poll_s
        self.initial_filter = initial_filter
        self.analyze_after_s = analyze_after_s
        self._start_follow = follow
        self._stamp: StoreStamp | None = None
        self._problems_seen: set[str] = set()
        self._polling = False
        self._findings_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static("", id="topbar")
        yield PhaseBar(id="phase-bar")
        with TabbedContent(initial="requests", id="tabs"):
            with TabPane("Requests (r)", id="requests"):
                yield RequestsPane(self.reader, id="requests-pane")
            with TabPane("Waterfall (w)", id="trace"):
                yield TracePane(self.reader, id="trace-pane")
            with TabPane("Findings (f)", id="findings"):
                yield FindingsPane(self.reader, id="findings-pane")
            with TabPane("Cache (c)", id="cache"):
                yield CacheView(self.reader, id="cache-view")
        yield Footer()

    # -- panes ---------------------------------------------------------------------------------------
    @property
    def requests(self) -> RequestsPane:
        return self.query_one(RequestsPane)

    @property
    def trace_pane(self) -> TracePane:
        return self.query_one(TracePane)

    @property
    def findings(self) -> FindingsPane:
        return self.query_one(FindingsPane)

    @property
    def cache_view(self) -> CacheView:
        return self.query_one(CacheView)

    def on_unmount(self) -> None:
        self.reader.close()  # the kept ClickHouse connection, if any

    def on_mount(self) -> None:
        self._update_topbar()
        self.follow = self._start_follow
        self.set_interval(self.poll_s, self._tick)
        if self.initial_filter:
            self.requests.set_filter(self.initial_filter)
        if self.requests.table.display:
            # an empty store's first load may have hidden the table already (the pane loads as it mounts,
            # before this runs): focusing it then would show its keys in the footer over an empty screen
            self.requests.table.focus()
        if self.analyze_after_s is not None:
            self.set_timer(self.analyze_after_s, self.findings.ensure_loaded)

    # -- top bar -------------------------------------------------------------------------------------
    def _update_topbar(self) -> None:
        text = Text()
        text.append(" llmtrace explore ", style="bold reverse")
        text.append(f" {self.db}", style="bold")
        if self._stamp is not None:
            text.append(f"  {self._stamp.passes:,} passes", style="")
        if self.follow:
            text.append("  ● live", style="bold #87d787")
        else:
            text.append("  ○ not following (l)", style="dim")
        text.append("   ? help", style="dim")
        self.query_one("#topbar", Static).update(text)

    def watch_follow(self, follow: bool) -> None:
        if self.is_running:  # (App.is_mounted is a method taking a widget: as a test it was always true)
            self._update_topbar()
            if follow:
                self._tick()

    # -- live mode -----------------------------------------------------------------------------------
    def _tick(self) -> None:
        if self.follow and not self._polling:
            self._polling = True
            self._read_stamp()

    @work(thread=True, group="poll")
    def _read_stamp(self) -> None:
        try:
            stamp = self.reader.stamp()
        except StoreError as exc:
            self.post_message(self.StampRead(None, str(exc)))
            return
        self.post_message(self.StampRead(stamp, None))

    @on(StampRead)
    def _stamp_read(self, message: StampRead) -> None:
        self._polling = False
        if message.error is not None:
            self._problem(message.error)
            return
        self._problems_seen.clear()  # the store answers again: a new failure deserves a new message
        previous, self._stamp = self._stamp, message.stamp
        self._update_topbar()
        if previous is not None and previous != message.stamp:
            self._store_changed()
        elif previous is None and message.stamp is not None and message.stamp.passes != self.requests.store_passes:
            self._store_changed()

    def _store_changed(self) -> None:
        self.requests.reload(keep_cursor=True)
        self.cache_view.stale = True
        self.findings.stale = True
        active = self.query_one(TabbedContent).active
        if active == "cache":
            self.cache_view.ensure_loaded()
        elif active == "trace":
            self.trace_pane.reload()  # a trace still being written grows in place
        elif active == "findings" and time.monotonic() - self._findings_at >= FINDINGS_EVERY_S:
            # The analyzers read the whole store: in live mode re-run them now and then, not every poll.
            self._findings_at = time.monotonic()
            self.findings.ensure_loaded()

    # -- messages from panes -------------------------------------------------------------------------
    @on(TraceChosen)
    def _trace_chosen(self, message: TraceChosen) -> None:
        self.query_one(TabbedContent).active = "trace"
        self.trace_pane.open(message.trace_id, message.span_id)
        self.trace_pane.waterfall.focus()

    @on(ShowTraces)
    def _show_traces(self, message: ShowTraces) -> None:
        self.query_one(TabbedContent).active = "requests"
        self.requests.set_filter("trace=" + ",".join(message.trace_ids[:50]))
        self.requests.table.focus()
        self.notify(f"passes of the traces behind: {message.label}", timeout=3)

    @on(PhaseToggled)
    def _phase_clicked(self, message: PhaseToggled) -> None:
        if message.phase is None:
            self.action_all_phases()
        else:
            self.action_toggle_phase(message.phase)

    @on(StoreProblem)
    def _store_problem(self, message: StoreProblem) -> None:
        self._problem(message.text)

    def _problem(self, text: str) -> None:
        if self.follow and text.startswith("no store at"):
            return  # live mode waits for the writer to create the store; the request pane says so
        if text not in self._problems_seen:  # live mode would repeat the same complaint every second
            self._problems_seen.add(text)
            self.notify(text, title="store", severity="error", timeout=8)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane_id = event.pane.id
        if pane_id == "findings":
            self.findings.ensure_loaded()
        elif pane_id == "cache":
            self.cache_view.ensure_loaded()

    # -- phases --------------------------------------------------------------------------------------
    def watch_phases(self, phases: frozenset[str]) -> None:
        if not self.is_running:
            return
        self.query_one(PhaseBar).set_phases(phases)
        self.trace_pane.set_phases(phases)
        self.findings.set_phases(phases)

    def action_toggle_phase(self, phase: str) -> None:
        self.phases = self.phases ^ {phase}

    def action_all_phases(self) -> None:
        self.phases = frozenset()

    # -- actions -------------------------------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_show_tab(self, tab: str) -> None:
        if tab not in TABS:
            raise ValueError(f"unknown tab {tab!r}")
        self.query_one(TabbedContent).active = tab
        focus = {"requests": "#requests-table", "trace": "#waterfall", "findings": "#findings-list",
                 "cache": "#cost-table"}[tab]
        self.query_one(focus).focus()

    def action_focus_filter(self) -> None:
        self.query_one(TabbedContent).active = "requests"
        self.query_one("#filter", Input).focus()

    def action_symptom_search(self) -> None:
        self.push_screen(SymptomSearch(), self._symptom_chosen)

    def _symptom_chosen(self, symptom_id: str | None) -> None:
        if not symptom_id:
            return
        self.query_one(TabbedContent).active = "findings"
        self.findings.show_symptom(symptom_id)

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.notify("live: following the store" if self.follow else "live mode off", timeout=2)

    def action_reload(self) -> None:
        self._problems_seen.clear()
        self.requests.reload(keep_cursor=True)
        self.trace_pane.reload()
        self.cache_view.stale = True
        self.findings.stale = True
        active = self.query_one(TabbedContent).active
        if active == "cache":
            self.cache_view.ensure_loaded()
        elif active == "findings":
            self.findings.ensure_loaded()

    def action_nav(self, where: str) -> None:
        """j/k/g/G/ctrl-d/ctrl-u on the focused list: the request table or an option list."""
        widget = self.focused
        if isinstance(widget, DataTable):
            rows = widget.row_count
            if rows:
                widget.move_cursor(row=_nav_target(where, widget.cursor_row, rows, widget.size.height),
                                   animate=False)
        elif isinstance(widget, OptionList):
            count = widget.option_count
            if count:
                widget.highlighted = _nav_target(where, widget.highlighted or 0, count, widget.size.height)

    def action_copy_trace_id(self) -> None:
        """y: the trace id under the cursor of the active tab, to the clipboard (OSC 52 in the terminal)."""
        trace_id = self._current_trace_id()
        if trace_id is None:
            self.notify("no trace under the cursor", timeout=2)
            return
        self.copy_to_clipboard(trace_id)
        self.notify(f"copied trace id {trace_id}", timeout=2)

    def _current_trace_id(self) -> str | None:
        active = self.query_one(TabbedContent).active
        if active == "trace":
            return self.trace_pane.trace_id
        if active == "findings":
            finding = self.findings.current()
            return finding.trace_ids[0] if finding is not None and finding.trace_ids else None
        row = self.requests.current()
        return row.trace_id if row is not None else None

    async def action_back(self) -> None:  # App's own action_back is a coroutine; Esc calls this one
        tabs = self.query_one(TabbedContent)
        focused = self.focused
        if isinstance(focused, Input) and focused.id == "filter":
            # Esc only leaves the box: a filter just applied stays (a second Esc in the table clears it).
            self.requests.table.focus()
        elif tabs.active == "trace":
            self.action_show_tab("requests")
        elif tabs.active == "findings" and (self.findings.symptom is not None or self.phases):
            self.phases = frozenset()
            self.findings.show_symptom(None)
        elif tabs.active == "requests" and not self.requests.filter.empty:
            self.requests.set_filter("")
        elif tabs.active != "requests":
            self.action_show_tab("requests")


def _nav_target(where: str, current: int, count: int, height: int) -> int:
    """The row a vim-style movement lands on, kept inside ``0 .. count-1``."""
    half = max(1, height // 2)
    target = {"down": current + 1, "up": current - 1, "top": 0, "bottom": count - 1,
              "half_down": current + half, "half_up": current - half}[where]
    return max(0, min(count - 1, target))
