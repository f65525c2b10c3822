"""One line naming the eight phases with their keys and colours; click or press 1–8 to filter."""

from __future__ import annotations

from rich.text import Text
from textual.events import Click
from textual.widgets import Static

from llmtrace.tracer.registry.stages import PHASES
from llmtrace.tui.messages import PhaseToggled
from llmtrace.tui.theme import phase_colour


class PhaseBar(Static):
    """Shows which phases the waterfall and findings are limited to (all of them when none is chosen)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._selected: frozenset[str] = frozenset()
        self._spans: list[tuple[int, int, str | None]] = []

    def on_mount(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def set_phases(self, selected: frozenset[str]) -> None:
        self._selected = selected
        self._draw()

    def _draw(self) -> None:
        compact = self.size.width and self.size.width < 130
        text = Text()
        self._spans = []
        text.append("phases " if not compact else "", style="dim")
        for p in PHASES:
            label = p.title.split(" ")[0] if compact else p.title
            if compact:
                label = label[:7]
            on = not self._selected or p.id in self._selected
            colour = phase_colour(p.id)
            start = len(text)
            text.append(f"{p.order}", style=f"bold reverse {colour}" if p.id in self._selected else f"bold {colour}")
            text.append(f" {label}", style=colour if on else "dim")
            self._spans.append((start, len(text), p.id))
            text.append("  " if not compact else " ")
        start = len(text)
        text.append("0 all", style="bold" if self._selected else "dim")
        self._spans.append((start, len(text), None))
        self.update(text)

    def on_click(self, event: Click) -> None:
        for start, end, phase in self._spans:
            if start <= event.x < end:
                self.post_message(PhaseToggled(phase))
                return
