"""Stores and reports for the report's tests, made the way the other areas make theirs: the explorer's recorded
support-agent store (client and server passes, tools, a deploy that breaks the cache), and the benchmarks'
synthetic store (every planted cause, eviction records and block-hash chains) at a small size. Each report is
written once per session through the CLI and only read by the tests; one headless Chromium serves them all."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for extra in (HERE.parent / "tui", HERE.parent / "adapters", ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from cdp import Browser, find_chromium  # noqa: E402
from report_helpers import write_report  # noqa: E402
from synthetic_store import make_store  # noqa: E402
from tui_store import record_support_store  # noqa: E402

# Screenshots are kept outside the tree for a person to look at (LLMTRACE_REPORT_SHOTS to choose where).
SHOTS = Path(os.environ.get("LLMTRACE_REPORT_SHOTS") or tempfile.gettempdir()) / "llmtrace-report-shots"


@pytest.fixture(scope="session")
def support_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_support_store(tmp_path_factory.mktemp("report-support") / "support.duckdb")


@pytest.fixture(scope="session")
def support_html(support_db: Path) -> Path:
    out = support_db.with_name("report.html")
    assert write_report(["report", "--db", str(support_db), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def regression_html(support_db: Path) -> Path:
    out = support_db.with_name("check.html")
    # v2 broke the cache: the gate fails (exit 1) and still writes its report
    rc = write_report(["check", "--db", str(support_db), "--deploy", "v2", "--baseline-deploy", "v1", "--ttft",
                       "--cost", "--html", str(out)])
    assert rc == 1
    return out


@pytest.fixture(scope="session")
def synthetic_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("report-synthetic") / "synthetic.duckdb", passes=3000, seed=1)


@pytest.fixture(scope="session")
def synthetic_html(synthetic_db: Path) -> Path:
    out = synthetic_db.with_name("report.html")
    assert write_report(["report", "--db", str(synthetic_db), "-o", str(out), "--max-traces", "4"]) == 0
    return out


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium; `make setup` installs it)")
    browser = Browser(binary).start()
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS
