"""Findings for people: a rich renderable (phase → stage → evidence → next check) and plain text.

On a terminal the rich form is used; piped output gets the plain form, which is also what tests and CI
logs read.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.core.finding_layout import FindingLayout, layout, short_ids

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


class FindingView:
    """One finding as a panel: where, why, the evidence table, the next check."""

    def __init__(self, finding: Finding | FindingLayout, rank: int = 0) -> None:
        self.view = finding if isinstance(finding, FindingLayout) else layout(finding, rank)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        f = self.view
        head = Text()
        head.append(f"{f.rank}. ", style="bold")
        head.append(f"[{f.severity}] ", style=SEVERITY_STYLE[f.severity])
        head.append(f.title, style="bold")
        where = Text(f.where, style="magenta")
        table = Table(show_header=True, header_style="dim", box=None, padding=(0, 1), expand=False)
        table.add_column("evidence")
        table.add_column("value", overflow="fold")
        table.add_column("traces", style="dim")
        for e in f.evidence:
            table.add_row(e.label, e.value, short_ids(e.trace_ids))
        parts = [where, Text(f.summary)] + ([Text(f.loss, style="bold")] if f.loss else [])
        body = Group(*parts, table, Text.assemble(("next: ", "bold green"), f.next_check))
        yield Panel(body, title=head, title_align="left", border_style=SEVERITY_STYLE[f.severity])


def plain(findings: Sequence[Finding]) -> str:
    """The findings as plain text (no colour, no boxes)."""
    if not findings:
        return "No findings: nothing in the store matches a symptom's cause.\n"
    lines: list[str] = []
    for f in (layout(x, i) for i, x in enumerate(findings, 1)):
        lines.append(f"{f.rank}. [{f.severity}] {f.title}")
        lines.append(f"   where: {f.where}   (symptom: {f.symptom}, score {f.score:.2f})")
        lines.append(f"   {f.summary}")
        if f.loss:
            lines.append(f"   {f.loss}")
        for e in f.evidence:
            ids = f"   [{short_ids(e.trace_ids)}]" if e.trace_ids else ""
            lines.append(f"   - {e.label}: {e.value}{ids}")
        lines.append(f"   next: {f.next_check}")
        if f.trace_ids:
            lines.append(f"   traces: {', '.join(f.trace_ids)}")
        lines.append("")
    return "\n".join(lines)


def print_findings(findings: Sequence[Finding], console: Console | None = None) -> None:
    """Rich on a terminal, plain text when the output is not one."""
    con = console or Console()
    if not con.is_terminal:
        con.file.write(plain(findings))
        return
    if not findings:
        con.print("[green]No findings:[/] nothing in the store matches a symptom's cause.")
        return
    for i, f in enumerate(findings, 1):
        con.print(FindingView(f, i))
