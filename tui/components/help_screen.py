"""The help screen: every key from the keymap and the filter language's fields."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from llmtrace.tui.data.filter_expr import filter_help
from llmtrace.tui.keymap import help_rows


def help_table() -> Table:
    table = Table(box=None, expand=True, padding=(0, 1), show_header=True, header_style="bold")
    table.add_column("key", style="bold #ffd75f", width=8, no_wrap=True)
    table.add_column("does", ratio=1)
    scope_seen = None
    for scope, key, does in help_rows():
        if scope != scope_seen:
            table.add_row("", Text(scope, style="bold underline"))
            scope_seen = scope
        table.add_row(key, does)
    table.add_row("", "")
    table.add_row("", Text("Mouse", style="bold underline"))
    table.add_row("click", "rows, tabs, column headers (sort) and the phase bar all respond to clicks")
    return table


def filter_table() -> Table:
    table = Table(box=None, expand=True, padding=(0, 1), show_header=True, header_style="bold",
                  title="filter box: terms are AND-ed, e.g.  ttft>2s finish=length deploy=v2", title_justify="left")
    table.add_column("field", style="bold #5fafff", ratio=1)
    table.add_column("means", ratio=4)
    for name, meaning in filter_help():
        table.add_row(name, meaning)
    table.add_row("word", "a bare word matches model, deploy, replica, finish reason, service or trace id")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text.assemble(("llmtrace explore", "bold"), ("  keys (esc or ? closes)", "dim")))
            yield Static(help_table())
            yield Static(filter_table(), id="help-filter")
