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

from llmtrace.analyzers.finding import Finding
from llmtrace.tracer.registry.stages import get_phase, get_stage

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _where(f: Finding) -> str:
    stage = get_stage(f.stage)
    where = f"{get_phase(f.phase).title} → {f.stage} (#{stage.number} {stage.title})"
    if len(f.stages) > 1:  # a merged cause: the stages it crosses, in pipeline order
        where += f"; crosses {' → '.join(f.stages)}"
    return where


def _loss(f: Finding) -> str:
    parts = []
    if f.loss_tokens:
        parts.append(f"{f.loss_tokens:,.0f} tokens")
    if f.loss_ms:
        parts.append(f"{f.loss_ms:,.0f} ms")
    if f.loss_usd:
        parts.append(f"${f.loss_usd:.4f}")
    text = ("lost: " + ", ".join(parts)) if parts else ""
    if f.affected_share:  # where the loss fell, not a loss of its own: "lost 83% of passes" read as one
        text += f"{' ' if text else ''}on {f.affected_share:.0%} of passes"
    return text


def _ids(ids: Sequence[str], n: int = 3) -> str:
    return ", ".join(i[:12] for i in ids[:n]) + (" …" if len(ids) > n else "")


class FindingView:
    """One finding as a panel: where, why, the evidence table, the next check."""

    def __init__(self, finding: Finding, rank: int) -> None:
        self.finding = finding
        self.rank = rank

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        f = self.finding
        head = Text()
        head.append(f"{self.rank}. ", style="bold")
        head.append(f"[{f.severity}] ", style=SEVERITY_STYLE[f.severity])
        head.append(f.title, style="bold")
        where = Text(_where(f), style="magenta")
        table = Table(show_header=True, header_style="dim", box=None, padding=(0, 1), expand=False)
        table.add_column("evidence")
        table.add_column("value", overflow="fold")
        table.add_column("traces", style="dim")
        for e in f.evidence:
            table.add_row(e.label, e.render_value(), _ids(e.trace_ids))
        parts = [where, Text(f.summary)] + ([Text(_loss(f), style="bold")] if _loss(f) else [])
        body = Group(*parts, table, Text.assemble(("next: ", "bold green"), f.next_check))
        yield Panel(body, title=head, title_align="left", border_style=SEVERITY_STYLE[f.severity])


def plain(findings: Sequence[Finding]) -> str:
    """The findings as plain text (no colour, no boxes)."""
    if not findings:
        return "No findings: nothing in the store matches a symptom's cause.\n"
    lines: list[str] = []
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. [{f.severity}] {f.title}")
        lines.append(f"   where: {_where(f)}   (symptom: {f.symptom}, score {f.score:.2f})")
        lines.append(f"   {f.summary}")
        if _loss(f):
            lines.append(f"   {_loss(f)}")
        for e in f.evidence:
            ids = f"   [{_ids(e.trace_ids)}]" if e.trace_ids else ""
            lines.append(f"   - {e.label}: {e.render_value()}{ids}")
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
