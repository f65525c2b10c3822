"""Symptom search: type what hurts ("first token slow", "json broken") and jump to the findings."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from llmtrace.tracer.registry.stages import get_phase
from llmtrace.tracer.registry.symptoms import SYMPTOMS, Symptom, search_symptoms


def _option(s: Symptom) -> Option:
    text = Text(s.title, style="bold")
    phases = ", ".join(get_phase(p).title for p in s.phases)
    text.append(f"\n  {phases} · {s.first_evidence}", style="dim")
    return Option(text, id=s.id)


class SymptomSearch(ModalScreen[str | None]):
    """Returns the chosen symptom id, or None when dismissed."""

    BINDINGS = [Binding("escape", "dismiss_none", "close"), Binding("down", "to_list", show=False)]

    def compose(self) -> ComposeResult:
        with Vertical(id="symptom-box"):
            yield Static(Text.assemble(("What hurts?", "bold"),
                                       ("  type, ↓ to pick, enter to jump to findings, esc to close", "dim")))
            yield Input(placeholder="first token slow, json broken, cost up after deploy …", id="symptom-input")
            yield OptionList(*[_option(s) for s in SYMPTOMS], id="symptom-list", compact=True)

    def on_mount(self) -> None:
        self.query_one("#symptom-list", OptionList).highlighted = 0

    @on(Input.Changed, "#symptom-input")
    def _changed(self, event: Input.Changed) -> None:
        matches = search_symptoms(event.value) if event.value.strip() else list(SYMPTOMS)
        listing = self.query_one("#symptom-list", OptionList)
        listing.set_options([_option(s) for s in matches])
        if matches:
            listing.highlighted = 0

    @on(Input.Submitted, "#symptom-input")
    def _submitted(self) -> None:
        listing = self.query_one("#symptom-list", OptionList)
        if listing.option_count and listing.highlighted is not None:
            self.dismiss(listing.get_option_at_index(listing.highlighted).id)

    @on(OptionList.OptionSelected, "#symptom-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_to_list(self) -> None:
        self.query_one("#symptom-list", OptionList).focus()

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
