"""The verdicts of ``llmtrace check`` and their three output formats: text, GitHub Actions annotations
(``::error``/``::warning``/``::notice`` workflow commands) and JUnit XML (one test case per metric)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from llmtrace.analyzers.core.finding import Finding


@dataclass(frozen=True, slots=True)
class Verdict:
    metric: str  # cache_hit_rate, ttft_p50_ms, ttft_p95_ms, cost_per_request_usd, billed_tokens_per_request
    label: str
    current: float | None
    baseline: float | None
    limit: str  # the rule in words: "drop <= 0.05", "increase <= 20%"
    ok: bool
    skipped: str | None = None  # why the metric could not be compared
    explanation: Finding | None = None
    warning: str | None = None  # passed, but beyond the allowance for a reason that is not the deploy's
    # why the gate abstains (the bootstrap interval straddles the allowance, or too few passes): neither a pass
    # nor a regression; how it exits is --inconclusive's choice (check_cli.py)
    inconclusive: str | None = None
    interval: tuple[float, float] | None = None  # the change's 90% bootstrap interval the verdict was read from

    @property
    def state(self) -> str:
        return "SKIP" if self.skipped else "INCONCLUSIVE" if self.inconclusive else "WARN" if self.warning else \
            "PASS" if self.ok else "FAIL"

    def line(self) -> str:
        state = self.state
        if self.skipped:
            return f"{state} {self.label}: {self.skipped}"
        return f"{state} {self.label}: {format_metric(self.metric, self.current)} (baseline {format_metric(self.metric, self.baseline)}; {self.limit})"


def format_metric(metric: str, v: float | None) -> str:
    """A gate metric as people read it (hit rate as a percentage, USD, milliseconds)."""
    if v is None:
        return "n/a"
    if metric == "cache_hit_rate":
        return f"{v:.1%}"
    if metric.endswith("_usd"):
        return f"${v:.6f}"
    if metric.startswith("billed_"):
        return f"{v:,.1f} tokens"
    return f"{v:.1f} ms"


def _explain(f: Finding) -> str:
    crosses = f" [crosses {' → '.join(f.stages)}]" if len(f.stages) > 1 else ""
    return f"{f.stage} ({f.phase}){crosses}: {f.title}. Next: {f.next_check}"


def _first_seen(verdicts: Sequence[Verdict]) -> dict[int, str]:
    """For each failed verdict whose explanation an earlier one already gave (TTFT p95 after p50): the
    label of that earlier verdict, so one cause is explained once."""
    seen: dict[tuple[str, str, str], str] = {}
    out: dict[int, str] = {}
    for i, v in enumerate(verdicts):
        if v.ok or v.explanation is None:
            continue
        key = (v.explanation.stage, v.explanation.title, v.explanation.cause)
        if key in seen:
            out[i] = seen[key]
        else:
            seen[key] = v.label
    return out


def text(verdicts: Sequence[Verdict], header: str) -> str:
    lines = [header]
    again = _first_seen(verdicts)
    for i, v in enumerate(verdicts):
        lines.append(v.line())
        if v.inconclusive:
            lines.append(f"     {v.inconclusive}")
        if v.warning:
            lines.append(f"     {v.warning}")
        if not v.ok and v.explanation is not None:
            if i in again:
                lines.append(f"     explained by the same cause as {again[i]} (above)")
                continue
            lines.append(f"     explained by {_explain(v.explanation)}")
            lines.extend(f"       - {e.label}: {e.render_value()}" for e in v.explanation.evidence[:4])
    failed = sum(1 for v in verdicts if not v.ok)
    warned = sum(1 for v in verdicts if v.warning)
    unsure = sum(1 for v in verdicts if v.inconclusive)
    lines.append(f"{'FAILED' if failed else 'INCONCLUSIVE' if unsure else 'OK'}: {failed} regression(s) in "
                 f"{len(verdicts)} check(s)" + (f", {unsure} inconclusive" if unsure else "")
                 + (f", {warned} warning(s)" if warned else ""))
    return "\n".join(lines) + "\n"


def _gh_escape(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_escape(s).replace(":", "%3A").replace(",", "%2C")


def github(verdicts: Sequence[Verdict], header: str) -> str:
    """Workflow commands: each regression an ::error annotation, everything else a ::notice."""
    out = []
    again = _first_seen(verdicts)
    for i, v in enumerate(verdicts):
        if v.inconclusive:
            out.append(inconclusive_annotation(v))
            continue
        if v.warning:
            out.append(f"::warning title={_gh_prop('llmtrace check: ' + v.label + ' rose with the machine load')}::"
                       f"{_gh_escape(v.line() + chr(10) + v.warning)}")
            continue
        if v.ok:
            out.append(f"::notice title={_gh_prop('llmtrace check: ' + v.label)}::{_gh_escape(v.line())}")
            continue
        msg = v.line()
        if i in again:
            msg += f"\nExplained by the same cause as {again[i]}"
        elif v.explanation is not None:
            msg += "\nExplained by " + _explain(v.explanation)
            msg += "".join(f"\n- {e.label}: {e.render_value()}" for e in v.explanation.evidence[:4])
        out.append(f"::error title={_gh_prop('llmtrace check: ' + v.label + ' regressed')}::{_gh_escape(msg)}")
    return "\n".join(out) + "\n" + text(verdicts, header)


def inconclusive_annotation(v: Verdict) -> str:
    """The GitHub Actions ``::warning`` of a verdict the gate abstained on."""
    return (f"::warning title={_gh_prop('llmtrace check: ' + v.label + ' inconclusive')}::"
            f"{_gh_escape(v.line() + chr(10) + (v.inconclusive or ''))}")


def junit(verdicts: Sequence[Verdict], header: str) -> str:
    failures = sum(1 for v in verdicts if not v.ok)
    skipped = sum(1 for v in verdicts if v.skipped or v.inconclusive)
    cases = []
    for v in verdicts:
        body = ""
        if v.skipped:
            body = f"<skipped message={quoteattr(v.skipped)}/>"
        elif v.inconclusive:  # neither passed nor failed: a skipped case that says why
            body = f"<skipped message={quoteattr('inconclusive: ' + v.inconclusive)}/>"
        elif v.warning:
            body = f"<system-out>{escape(v.line() + chr(10) + v.warning)}</system-out>"
        elif not v.ok:
            detail = v.line() + ("\n" + _explain(v.explanation) if v.explanation else "")
            if v.explanation is not None:
                detail += "".join(f"\n- {e.label}: {e.render_value()}" for e in v.explanation.evidence)
            body = f"<failure message={quoteattr(v.line())} type=\"regression\">{escape(detail)}</failure>"
        cases.append(f'  <testcase classname="llmtrace.check" name={quoteattr(v.metric)}>{body}</testcase>')
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            f"<testsuite name=\"llmtrace check\" tests=\"{len(verdicts)}\" failures=\"{failures}\" "
            f"skipped=\"{skipped}\" errors=\"0\">\n"
            f"  <properties><property name=\"summary\" value={quoteattr(header)}/></properties>\n"
            + "\n".join(cases) + "\n</testsuite>\n")


FORMATS = {"text": text, "github": github, "junit": junit}
