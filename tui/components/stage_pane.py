"""The stage pane: what the highlighted span is, its boundary values with units and meanings from the
registry, what the stage does and what goes wrong there."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.semconv import LLMTRACE_PHASE, LLMTRACE_STAGE
from llmtrace.tracer.registry.stages import Stage, declared_value, get_phase, is_stage
from llmtrace.tracer.storage.time_views import pass_is_split
from llmtrace.tui import format as fmt
from llmtrace.tui.components.time_bar import phase_parts, time_bar, whole_call_parts
from llmtrace.tui.data.records import SpanRecord
from llmtrace.tui.theme import PASS_COLOUR, phase_colour

_SKIP = {LLMTRACE_STAGE, LLMTRACE_PHASE, N.PROMPT_SEGMENTS}


HINT = Text("Highlight a row in the waterfall (↑/↓ or click) to see its stage, values and what goes wrong there.",
            style="dim")


class StagePane(VerticalScroll):
    """Explains one span; a plain Static inside a scroll container so long stages can be read to the end."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.span: SpanRecord | None = None

    def compose(self):
        yield Static(HINT, id="stage-body")

    def show(self, span: SpanRecord | None,
             breakdown: Sequence[tuple[str | None, str, float]] | None = None, time_observed: bool = True) -> None:
        self.span = span
        body = self.query_one("#stage-body", Static)
        body.update(HINT if span is None else explain(span, breakdown, max(20, self.size.width - 4), time_observed))
        self.scroll_home(animate=False)


def explain(span: SpanRecord, breakdown: Sequence[tuple[str | None, str, float]] | None = None,
            width: int = 60, time_observed: bool = True) -> RenderableType:
    """``time_observed``: False where the span's length is a wait that holds the stage (waterfall_model.py)."""
    stage_id = span.stage if span.stage and is_stage(span.stage) else None
    if span.is_tool:
        stage_id = S.LOOP_TOOL_DISPATCH
    if stage_id is not None and not span.is_pass:
        from llmtrace.tracer.registry.stages import get_stage

        return _explain_stage(span, get_stage(stage_id), time_observed)
    return _explain_pass(span, breakdown, width)


def _header(span: SpanRecord, title: str, colour: str, time_observed: bool = True) -> Text:
    head = Text(title, style=f"bold {colour}")
    status = span.status or "ok"
    if time_observed:
        head.append(f"   {fmt.ms(span.duration_ms)}", style="bold")
    else:
        head.append("   own time not observed", style="dim")
    if status != "ok":
        head.append(f"   {status}", style="bold #ff5f5f")
        if span.status_message:
            head.append(f": {span.status_message}", style="#ff5f5f")
    return head


def _explain_stage(span: SpanRecord, stage: Stage, time_observed: bool = True) -> RenderableType:
    phase = get_phase(stage.phase)
    colour = phase_colour(stage.phase)
    parts: list[RenderableType] = [
        _header(span, f"{stage.number}. {stage.title}  ({stage.id})", colour, time_observed),
        Text(f"phase {phase.order} {phase.title} · recorded by {span.service or '?'}", style="dim"),
    ]
    if span.attributes.get(N.OBSERVED) is False:
        reason = span.attributes.get(N.UNOBSERVED_REASON, "no reason given")
        parts.append(Text(f"not observed here: {reason}", style="#ffaf5f"))
    if not time_observed:
        parts.append(Text(f"time not observed: from the client this span is the wait up to the first response byte "
                          f"({fmt.ms(span.duration_ms)}), which holds the provider's queue, prefill and network; the "
                          "stage's own time is inside it and was not measured.", style="#ffaf5f"))
    table = _values_table()
    for v in stage.values:
        raw = span.attributes.get(v.name)
        shown = Text("not recorded", style="dim") if raw is None else Text(_with_unit(raw, v.unit), style="bold")
        table.add_row(Text(v.name, style=colour if raw is not None else "dim"), shown, Text(v.meaning, style="dim"))
    known = {v.name for v in stage.values} | _SKIP | {N.OBSERVED, N.UNOBSERVED_REASON,
                                                      N.GEN_AI_OPERATION_NAME}
    for name, raw in sorted(span.attributes.items()):
        if name not in known:
            bv = declared_value(name)
            table.add_row(Text(name), Text(_with_unit(raw, bv.unit if bv else ""), style="bold"),
                          Text(bv.meaning if bv else "", style="dim"))
    parts += [Text(""), table, Text(""),
              Text.assemble(("What it does  ", "bold"), stage.description),
              Text.assemble(("What goes wrong  ", "bold #ffaf5f"), stage.goes_wrong)]
    if stage.symptoms:
        parts.append(Text.assemble(("Symptoms  ", "bold"), ", ".join(stage.symptoms),
                                   ("   (press s to search)", "dim")))
    return Group(*parts)


def _explain_pass(span: SpanRecord, breakdown: Sequence[tuple[str | None, str, float]] | None,
                  width: int) -> RenderableType:
    side = span.side or "?"
    title = f"{side} pass · {span.name}" if span.is_pass else span.name
    parts: list[RenderableType] = [
        _header(span, title, PASS_COLOUR),
        Text(f"service {span.service or '?'} · deploy {span.deploy or fmt.NONE} · span {span.span_id}", style="dim"),
        Text(""),
    ]
    if breakdown:
        if pass_is_split(span.side, span.attributes.get(N.TTFT_MS)):
            bar = time_bar(phase_parts(breakdown), width)
        else:  # no first token seen (a buffered answer, a failed call): only the whole call was observed
            bar = time_bar(whole_call_parts(breakdown), width, whole_ms=span.duration_ms)
        parts += [Text("Where the time goes", style="bold"), bar, Text("")]
    table = _values_table()
    for name, raw in sorted(span.attributes.items()):
        if name in _SKIP:
            continue
        bv = declared_value(name)  # the pass span's values are declared in the registry like the stages'
        unit, meaning = (bv.unit, bv.meaning) if bv else ("", "")
        table.add_row(Text(name), Text(_with_unit(raw, unit), style="bold"), Text(meaning, style="dim"))
    parts.append(table)
    if span.is_pass:
        parts += [Text(""), Text("A pass is one trip through the model; its stages are the rows beneath it.",
                                 style="dim")]
    return Group(*parts)


class ValueList:
    """Boundary values as name · value · meaning; falls back to two lines per value when the pane is
    too narrow for the meaning to sit beside them (names never wrap: people search for them)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Text, Text, Text]] = []

    def add_row(self, name: Text, value: Text, meaning: Text) -> None:
        self.rows.append((name, value, meaning))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if not self.rows:
            return
        name_w = min(max(n.cell_len for n, _, _ in self.rows), max(16, int(width * 0.42)))
        value_w = min(max(v.cell_len for _, v, _ in self.rows), 22)
        meaning_w = width - name_w - value_w - 4
        if meaning_w >= 24:
            table = Table(box=None, show_header=True, header_style="bold", padding=(0, 1), pad_edge=False)
            table.add_column("boundary value", width=name_w, no_wrap=True, overflow="ellipsis")
            table.add_column("", width=value_w, justify="right", no_wrap=True, overflow="ellipsis")
            table.add_column("meaning", width=meaning_w, overflow="fold")
            for row in self.rows:
                table.add_row(*row)
            yield table
            return
        for name, value, meaning in self.rows:
            if name.cell_len + value.cell_len + 1 > width:  # a long value gets a line of its own
                yield name
                yield Text("   ") + value
            else:
                line = name.copy()
                line.append(" " * (width - name.cell_len - value.cell_len))
                line.append_text(value)
                yield line
            if meaning.plain:
                yield Text("   " + meaning.plain, style="dim")


def _values_table() -> ValueList:
    return ValueList()


def _with_unit(raw: object, unit: str) -> str:
    text = fmt.value(raw)
    return f"{text} {unit}" if unit and unit not in ("0..1",) and not isinstance(raw, (bool, str)) else text
