"""``llmtrace check --html``: a verdict that is past its allowance but not gated (INCONCLUSIVE: too few passes
to tell; a WARN: the machine got busier) reads so in the page's verdict table, with its reason, as it does in
the text report; it read PASS, the reason nowhere on the page."""

from __future__ import annotations

import json
from pathlib import Path

from report_helpers import write_report


def test_a_warned_verdict_reads_warn_with_its_reason(support_db: Path, tmp_path: Path) -> None:
    baseline, out = tmp_path / "baseline.json", tmp_path / "check.html"
    # a baseline of two passes, each all cached: the candidate's hit rate is far below, and two passes tell nothing
    baseline.write_text(json.dumps({"version": 1, "deploy": "v1", "passes": 2, "hit_rate": 1.0,
                                    "ttft_p50_ms": None, "ttft_p95_ms": None, "cost_per_request_usd": None,
                                    "hit_sample": [[100, 100], [100, 100]]}))
    rc = write_report(["check", "--db", str(support_db), "--deploy", "v2", "--baseline", str(baseline),
                       "--html", str(out)])
    assert rc == 3  # inconclusive: the gate abstains
    html = out.read_text()
    regression = html[html.index('id="regression"'):html.index('id="findings"')]
    row = regression[regression.index('<tr data-verdict="cache_hit_rate">'):]
    row = row[:row.index("</tr>")]
    assert 'class="warn">INCONCLUSIVE<' in row and "too few passes" in row, row
