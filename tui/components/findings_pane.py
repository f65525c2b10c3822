"""The findings: what the analyzers concluded, each with its evidence and the traces behind it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from llmtrace.tracer.cli.console import printable
from llmtrace.tracer.registry.stages import get_phase
from llmtrace.tracer.registry.symptoms import Symptom, get_symptom
from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui.data.findings_source import AnalyzersUnavailable, read_findings
from llmtrace.tui.data.store_reader import StoreReader
from llmtrace.tui.format import printable_lines
from llmtrace.tui.keymap import bindings
from llmtrace.tui.messages import ShowTraces, TraceChosen
from llmtrace.tui.theme import phase_colour, severity_style

if TYPE_CHECKING:
    from llmtrace.analyzers.core.finding import Finding

NARROW = 110
SEVERITY_MARK = {"critical": "●", "warning": "▲", "info": "○"}


class FindingsPane(Horizontal):
    BINDINGS = bindings("findings")

    class FindingsLoaded(Message):
        def __init__(self, findings: tuple[Finding, ...] | None, error: str | None,
                     failures: tuple[str, ...] = ()) -> None:
            super().__init__()
            self.findings = findings
            self.error = error
            self.failures = failures

    class Progress(Message):
        def __init__(self, done: int, total: int, symptom: str) -> None:
            super().__init__()
            self.done = done
            self.total = total
            self.symptom = symptom

    def __init__(self, reader: StoreReader, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.reader = reader
        self.findings: tuple[Finding, ...] = ()
        self.failures: tuple[str, ...] = ()
        self.shown: list[Finding] = []
        self.phases: frozenset[str] = frozenset()
        self.symptom: Symptom | None = None
        self.loaded = False
        self.running = False
        self.stale = False
        self._pending_focus = False

    def compose(self) -> ComposeResult:
        with Vertical(id="findings-left"):
            yield Static("", id="findings-header")
            yield OptionList(id="findings-list", compact=True)
        with VerticalScroll(id="finding-detail"):
            yield Static(Text("Running the analyzers …", style="dim"), id="finding-body")
            yield Static(Text("traces behind this finding (enter opens, t lists them)", style="dim"),
                         id="finding-traces-title")
            yield OptionList(id="finding-traces", compact=True)

    def on_resize(self) -> None:
        # Below NARROW columns the detail goes under the list instead of beside it.
        self.set_class(self.size.width < NARROW, "-narrow")

    # -- loading -------------------------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        if (not self.loaded or self.stale) and not self.running:
            self.reload()

    def reload(self) -> None:
        self.running = True
        self.stale = False
        self.query_one("#findings-header", Static).update(Text("running the analyzers …", style="dim"))
        self._run()

    @work(thread=True, exclusive=True, group="findings")
    def _run(self) -> None:
        try:
            result = read_findings(self.reader, progress=lambda i, n, s: self.post_message(self.Progress(i, n, s)))
        except (StoreError, AnalyzersUnavailable) as exc:
            self.post_message(self.FindingsLoaded(None, str(exc)))
            return
        except Exception as exc:  # an analyzer bug must not take the explorer down
            self.post_message(self.FindingsLoaded(None, f"the analyzers failed: {type(exc).__name__}: {exc}"))
            return
        self.post_message(self.FindingsLoaded(result.findings, None, result.failures))

    @on(Progress)
    def _progress(self, message: Progress) -> None:
        if self.running:
            text = Text(f"running the analyzers … {message.done}/{message.total} ({message.symptom})", style="dim")
            self.query_one("#findings-header", Static).update(text)

    @on(FindingsLoaded)
    def _loaded(self, message: FindingsLoaded) -> None:
        self.running = False
        self.loaded = True
        if message.error is not None:
            self.findings = ()
            self._redraw(error=message.error)
            return
        self.findings = message.findings or ()
        self.failures = message.failures
        if message.failures:
            self.notify("\n".join(message.failures), title="some analyzers failed", severity="warning", timeout=8)
        self._redraw()

    # -- filters -------------------------------------------------------------------------------------
    def set_phases(self, phases: frozenset[str]) -> None:
        self.phases = phases
        if self.loaded:
            self._redraw()

    def show_symptom(self, symptom_id: str | None) -> None:
        """Limit the list to one symptom's findings (None: all) and highlight the best one."""
        self.symptom = get_symptom(symptom_id) if symptom_id else None
        self._pending_focus = True
        if self.loaded and not self.stale:
            self._redraw()
        else:
            self.ensure_loaded()

    def _visible(self) -> list[Finding]:
        out = []
        for f in self.findings:
            if self.symptom is not None and f.symptom != self.symptom.id:
                continue
            if self.phases and f.phase not in self.phases:
                continue
            out.append(f)
        return out

    def _redraw(self, error: str | None = None) -> None:
        self.shown = self._visible()
        header = Text()
        if error:
            header.append(error, style="bold #ff5f5f")
        else:
            header.append(f"{len(self.shown)} of {len(self.findings)} findings", style="bold")
            if self.symptom is not None:
                header.append(f" · {self.symptom.title}", style="bold #ffd75f")
            if self.phases:
                header.append(f" · phases {', '.join(sorted(self.phases))}", style="dim")
            if self.symptom is not None or self.phases:
                header.append("  (esc / 0 clears)", style="dim")
            if self.failures:
                names = ", ".join(f.split(":", 1)[0] for f in self.failures)
                header.append(f" · {len(self.failures)} analyzer(s) failed: {names}", style="#ff8787")
        self.query_one("#findings-header", Static).update(header)
        listing = self.query_one("#findings-list", OptionList)
        listing.set_options([Option(_finding_line(f), id=str(i)) for i, f in enumerate(self.shown)])
        if self.shown:
            listing.highlighted = 0
            self._show_detail(self.shown[0])
        else:
            self._show_detail(None, error)
        if self._pending_focus:
            self._pending_focus = False
            (listing if self.shown else self.query_one("#findings-list")).focus()

    def _show_detail(self, finding: Finding | None, error: str | None = None) -> None:
        body = self.query_one("#finding-body", Static)
        traces = self.query_one("#finding-traces", OptionList)
        if finding is None:
            body.update(_nothing(self.symptom, self.phases, error, bool(self.findings)))
            traces.set_options([])
            return
        body.update(_detail(finding))
        ids = _unique(finding.trace_ids)
        traces.set_options([Option(Text(t, style="bold"), id=t) for t in ids[:200]])
        if ids:
            traces.highlighted = 0

    def current(self) -> Finding | None:
        i = self.query_one("#findings-list", OptionList).highlighted
        return self.shown[i] if i is not None and 0 <= i < len(self.shown) else None

    @on(OptionList.OptionHighlighted, "#findings-list")
    def _finding_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        finding = self.current()
        if finding is not None:
            self._show_detail(finding)

    @on(OptionList.OptionSelected, "#findings-list")
    def _finding_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_open_first_trace()

    @on(OptionList.OptionSelected, "#finding-traces")
    def _trace_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(TraceChosen(event.option.id))

    def action_open_first_trace(self) -> None:
        finding = self.current()
        if finding is not None and finding.trace_ids:
            self.post_message(TraceChosen(finding.trace_ids[0]))

    def action_finding_traces(self) -> None:
        finding = self.current()
        if finding is not None and finding.trace_ids:
            self.post_message(ShowTraces(tuple(_unique(finding.trace_ids)), finding.title))


def _unique(ids: tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys(ids))


def _finding_line(f: Finding) -> Text:
    text = Text()
    text.append(SEVERITY_MARK.get(f.severity, "·") + " ", style=severity_style(f.severity))
    text.append(printable(f.title), style="bold")
    text.append("\n   ")
    text.append(f.stage, style=phase_colour(f.phase))
    text.append(f" · {f.symptom} · {len(_unique(f.trace_ids))} traces", style="dim")
    return text


def _detail(finding: Finding) -> RenderableType:
    """The finding's parts as the terminal and the report lay them out (analyzers/core/finding_layout.py), drawn
    for the pane (the analyzers are imported by now: this pane shows what they found)."""
    from llmtrace.analyzers.core.finding_layout import layout

    f = layout(finding)
    parts: list[RenderableType] = [
        Text(printable(f.title), style=f"bold {severity_style(f.severity) or ''}".strip()),
        Text.assemble((f"{f.severity} · ", "dim"), (f"{f.phase_title} / {f.stage}", phase_colour(f.phase)),
                      (f" · symptom {f.symptom} · score {f.score:.2f}", "dim")),
        Text(""),
        Text(printable_lines(f.summary)),
        Text(""),
    ]
    if f.evidence:
        table = Table(box=None, expand=True, header_style="bold", padding=(0, 1))
        table.add_column("evidence", ratio=4, overflow="fold")
        table.add_column("value", ratio=3, overflow="fold")
        table.add_column("traces", ratio=1, justify="right")
        for e in f.evidence:
            table.add_row(printable(e.label), Text(printable(e.value), style="bold"), str(len(e.traces)))
        parts += [table, Text("")]
    parts.append(Text.assemble(("Next check  ", "bold #5fd7d7"), printable(f.next_check)))
    if f.stage_known:
        parts.append(Text(f"(open a trace and highlight {f.stage} for its boundary values)", style="dim"))
    return Group(*parts)


def _nothing(symptom: Symptom | None, phases: frozenset[str], error: str | None, any_findings: bool) -> RenderableType:
    if error:
        return Text(error, style="#ff5f5f")
    if symptom is not None:
        opened = ", ".join(get_phase(p).title for p in symptom.phases)
        return Group(
            Text(f"No finding for “{symptom.title}” in this store.", style="bold"),
            Text(""),
            Text.assemble(("Phases to open  ", "bold"), opened),
            Text.assemble(("First evidence  ", "bold"), symptom.first_evidence),
            Text(""),
            Text("Press 1–8 to look at those phases in a trace's waterfall.", style="dim"),
        )
    if phases and any_findings:
        return Text("No finding in the chosen phases (press 0 for all).", style="dim")
    return Text("The analyzers found nothing to report in this store.", style="dim")
