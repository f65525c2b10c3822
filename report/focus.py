"""The regression page of ``llmtrace check --html``: the verdicts, baseline and candidate side by side, the
finding that explains each failure, and the slowest trace of each side, ahead of the usual report (whose
per-deploy charts are then limited to the two deploys compared)."""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.gate.baseline import Metrics
from llmtrace.analyzers.gate.check_report import Verdict, format_metric
from llmtrace.report import page
from llmtrace.report.data import ReportData


@dataclass(frozen=True, slots=True)
class Focus:
    header: str  # check's own summary line
    verdicts: tuple[Verdict, ...]
    current: Metrics
    baseline: Metrics
    against: str  # "baseline FILE" or "deploy NAME"
    baseline_deploy: str | None = None  # set when the baseline is a deploy in the same store

    def deploys(self) -> tuple[str, ...] | None:
        if self.baseline_deploy is None or self.current.deploy is None:
            return None
        return (self.baseline_deploy, self.current.deploy)

    def explains(self, finding: Finding) -> bool:
        return any(v.explanation is not None and not v.ok and _same(v.explanation, finding) for v in self.verdicts)

    def traces(self, data: ReportData) -> list[str]:
        """The traces this page opens first: each explanation's, then the slowest of each side."""
        out = [t for v in self.verdicts if v.explanation is not None for t in v.explanation.trace_ids[:2]]
        for deploy in (self.baseline_deploy, self.current.deploy):
            if deploy is not None:
                out += data.sample_traces(deploy)
        return out


def _same(a: Finding, b: Finding) -> bool:
    return (a.symptom, a.stage, a.title) == (b.symptom, b.stage, b.title)


def focus_section(f: Focus, data: ReportData, findings: list[Finding], linked: set[str]) -> str:
    rank = {(x.symptom, x.stage, x.title): i + 1 for i, x in enumerate(findings)}
    rows = []
    for v in f.verdicts:
        state = "skip" if v.skipped else "inconclusive" if v.inconclusive else "warn" if v.warning else \
            "pass" if v.ok else "fail"
        why = ""
        if v.explanation is not None:
            n = rank.get((v.explanation.symptom, v.explanation.stage, v.explanation.title))
            title = page.e(f"{v.explanation.stage}: {v.explanation.title}")
            why = f'<a href="#finding-{n}">{title}</a>' if n else title
            why += " " + page.trace_links(v.explanation.trace_ids[:3], linked)
        note = v.inconclusive or v.warning  # why the gate abstained, or why it passed past the allowance
        rule = page.e(v.skipped or (f"{v.limit}; {note}" if note else v.limit))
        rows.append(f'<tr data-verdict="{page.e(v.metric)}"><td>{page.e(v.label)}</td>'
                    f'<td class="num">{format_metric(v.metric, v.baseline)}</td><td class="num">{format_metric(v.metric, v.current)}</td>'
                    f'<td>{rule}</td><td class="{"warn" if state == "inconclusive" else state}">{state.upper()}</td>'
                    f'<td>{why}</td></tr>')
    verdicts = ("<table><tr><th>metric</th><th>baseline</th><th>candidate</th><th>rule</th><th>result</th>"
                f"<th>explained by</th></tr>{''.join(rows)}</table>")
    failed = sum(1 for v in f.verdicts if not v.ok)
    cand = f"deploy {f.current.deploy}" if f.current.deploy else "the window"
    side = "".join(
        f'<div class="card"><h3>{page.e(title)}</h3>' + page.kpis([
            ("passes", f"{m.passes:,}"), ("hit rate", format_metric("cache_hit_rate", m.hit_rate)),
            ("TTFT p50", format_metric("ttft", m.ttft_p50_ms)), ("TTFT p95", format_metric("ttft", m.ttft_p95_ms)),
            ("cost / 1k calls", "n/a" if m.cost_per_request_usd is None else f"${m.cost_per_request_usd * 1000:.4f}")])
        + "</div>"
        for title, m in ((f"baseline: {f.against}", f.baseline), (f"candidate: {cand}", f.current)))
    pairs = []
    for label, deploy in (("slowest baseline trace", f.baseline_deploy), ("slowest candidate trace", f.current.deploy)):
        ids = [t for t in (data.sample_traces(deploy) if deploy else []) if t in linked]
        if ids:
            pairs.append(f"{page.e(label)}: {page.trace_links(tuple(ids), linked)}")
    traces = f'<p class="note">{" · ".join(pairs)}</p>' if pairs else ""
    status = (f'<p class="fail">{failed} regression(s) in {len(f.verdicts)} check(s)</p>' if failed
              else f'<p class="pass">no regression in {len(f.verdicts)} check(s)</p>')
    return (page.card(f.header, status + verdicts + traces) + f'<div class="grid">{side}</div>')
