"""The cache view: hit rate over time with deploy markers, and what a request costs under each deploy."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui import format as fmt
from llmtrace.tui.components.cache_chart import CacheChart
from llmtrace.tui.data.records import CacheReport
from llmtrace.tui.data.store_reader import StoreReader
from llmtrace.tui.messages import StoreProblem


class CacheView(Vertical):
    class ReportLoaded(Message):
        def __init__(self, report: CacheReport | None) -> None:
            super().__init__()
            self.report = report

    def __init__(self, reader: StoreReader, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.reader = reader
        self.report: CacheReport | None = None
        self.running = False
        self.stale = True

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("prefix-cache hit rate over time", "bold"),
                                   ("  (cached ÷ prompt tokens; ▲ marks a deploy)", "dim")), id="cache-title")
        yield CacheChart(id="cache-chart")
        yield Static(Text("cost per request by deploy", style="bold"), id="cost-title")
        table: DataTable[Text] = DataTable(id="cost-table", cursor_type="row", zebra_stripes=True)
        yield table

    def on_mount(self) -> None:
        table = self.query_one("#cost-table", DataTable)
        for label, key in (("deploy", "deploy"), ("passes", "passes"), ("hit rate", "hit"),
                           ("TTFT p50", "ttft"), ("prompt", "prompt"), ("cost/request", "cost")):
            table.add_column(Text(label, style="bold", justify="left" if key == "deploy" else "right"), key=key)

    def ensure_loaded(self) -> None:
        if self.stale and not self.running:
            self.reload()

    def reload(self) -> None:
        self.running = True
        self.stale = False
        self._load()

    @work(thread=True, exclusive=True, group="cache")
    def _load(self) -> None:
        try:
            report = self.reader.cache_report()
        except StoreError as exc:
            self.post_message(StoreProblem(str(exc)))
            self.post_message(self.ReportLoaded(None))
            return
        self.post_message(self.ReportLoaded(report))

    @on(ReportLoaded)
    def _loaded(self, message: ReportLoaded) -> None:
        self.running = False
        if message.report is None:  # the read failed (the app has said why): try again next time
            self.stale = True
            return
        self.report = message.report
        self.query_one(CacheChart).show(message.report)
        table = self.query_one("#cost-table", DataTable)
        table.clear()
        for c in message.report.costs:
            table.add_row(
                Text(c.deploy),
                Text(fmt.count(c.passes), justify="right"),
                Text(fmt.pct(c.hit_rate), justify="right"),
                Text(fmt.ms(c.ttft_p50_ms), justify="right"),
                Text(fmt.count(c.prompt_tokens_mean), justify="right"),
                Text(fmt.usd(c.cost_per_request_usd), justify="right"),
                key=c.deploy,
            )
