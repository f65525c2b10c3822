"""Every key the explorer answers to, as data: the app, widgets and the help screen all read this table.

A scope names where a key works: ``app`` everywhere, the others only while that pane has focus.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType

from llmtrace.tracer.registry.stages import PHASES


@dataclass(frozen=True, slots=True)
class Key:
    key: str
    action: str
    description: str
    scope: str = "app"
    show: bool = True
    display: str | None = None


_PHASE_KEYS = tuple(
    Key(str(p.order), f"app.toggle_phase('{p.id}')", f"show only / also {p.title}", show=False)
    for p in PHASES
)

KEYS: tuple[Key, ...] = (
    Key("question_mark", "app.help", "help", display="?"),
    Key("slash", "app.focus_filter", "filter", display="/"),
    Key("s", "app.symptom_search", "symptom"),
    Key("r", "app.show_tab('requests')", "requests", show=False),
    Key("w", "app.show_tab('trace')", "waterfall", show=False),
    Key("f", "app.show_tab('findings')", "findings", show=False),
    Key("c", "app.show_tab('cache')", "cache", show=False),
    *_PHASE_KEYS,
    Key("0", "app.all_phases", "all phases again", show=False),
    Key("l", "app.toggle_follow", "live"),
    Key("ctrl+r", "app.reload", "reload", show=False),
    Key("escape", "app.back", "back (leaves the filter box, keeping the filter)", show=False),
    Key("y", "app.copy_trace_id", "copy id"),
    Key("q", "app.quit", "quit"),
    # vim-style movement in whichever list has focus (the request table, findings, the waterfall)
    Key("j", "app.nav('down')", "down", show=False),
    Key("k", "app.nav('up')", "up", show=False),
    Key("g", "app.nav('top')", "first row", show=False),
    Key("G", "app.nav('bottom')", "last row", show=False),
    Key("ctrl+d", "app.nav('half_down')", "half a page down", show=False),
    Key("ctrl+u", "app.nav('half_up')", "half a page up", show=False),
    # request table
    Key("enter", "select_cursor", "open trace", scope="requests", show=False),
    Key("o", "sort_next", "sort", scope="requests"),
    Key("O", "sort_previous", "sort back", scope="requests", show=False),
    Key("i", "sort_invert", "reverse", scope="requests"),
    # findings
    Key("t", "finding_traces", "its traces", scope="findings"),
    Key("enter", "open_first_trace", "open trace", scope="findings", show=False),
    # waterfall
    Key("enter", "explain", "explain stage", scope="waterfall", show=False),
)

SCOPE_TITLES = {
    "app": "Everywhere",
    "requests": "Request table",
    "findings": "Findings",
    "waterfall": "Waterfall",
}


def bindings(scope: str) -> list[BindingType]:
    """Textual bindings for one scope, built from the table above."""
    return [Binding(k.key, k.action, k.description, show=k.show, key_display=k.display)
            for k in KEYS if k.scope == scope]


def help_rows() -> list[tuple[str, str, str]]:
    """(scope title, key as typed, what it does) for the help screen; phase keys folded into one row."""
    rows: list[tuple[str, str, str]] = []
    for k in KEYS:
        if k in _PHASE_KEYS:
            continue
        if k.action.startswith("app.nav("):
            if k.key == "j":
                nav = [n for n in KEYS if n.action.startswith("app.nav(")]
                rows.append((SCOPE_TITLES["app"], " ".join(n.key.replace("ctrl+", "^") for n in nav),
                             ", ".join(n.description for n in nav)))
            continue
        rows.append((SCOPE_TITLES[k.scope], k.display or _display(k.key), k.description))
        if k.action == "app.show_tab('cache')":
            names = ", ".join(f"{p.order} {p.title}" for p in PHASES)
            rows.append((SCOPE_TITLES["app"], "1–8", f"phase filter ({names})"))
    return rows


def _display(key: str) -> str:
    return {"escape": "esc", "enter": "enter"}.get(key, key)
