"""`diagnose` answers the same whatever order a store holds its spans in (the quoted traces included: a
finding that quotes "the first five rows" of a query without an order quotes whatever the scan returned
first), and the shortcuts that keep it fast over 100k passes give the answers of the slow, plain reads:
the TTFT split of a finding's traces is the ``ttft_breakdown`` view's over the whole store."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from llmtrace.cli import main
from llmtrace.tracer.storage.store import read_connection, write_connection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import make_store  # noqa: E402

SPLIT = "time to first token spent in prefill"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A synthetic store with every planted cause, and a copy holding the same spans in another order."""
    tmp = tmp_path_factory.mktemp("repeatable")
    db = make_store(tmp / "a.duckdb", passes=600, seed=4)
    shuffled = tmp / "b.duckdb"
    shutil.copy(db, shuffled)
    with write_connection(shuffled) as conn:
        conn.execute("CREATE TEMP TABLE moved AS SELECT * FROM spans ORDER BY hash(span_id || 'x')")
        conn.execute("DELETE FROM spans")
        conn.execute("INSERT INTO spans SELECT * FROM moved")
    with read_connection(db) as a, read_connection(shuffled) as b:
        first = [r[0] for r in a.execute("SELECT span_id FROM spans LIMIT 50").fetchall()]
        assert first != [r[0] for r in b.execute("SELECT span_id FROM spans LIMIT 50").fetchall()]
    return db, shuffled


@pytest.fixture(scope="module")
def skewed(stores: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store with the server's clock 3 s behind the app's: its spans start before the client pass that
    encloses them in truth."""
    db = tmp_path_factory.mktemp("skewed") / "skewed.duckdb"
    shutil.copy(stores[0], db)
    with write_connection(db) as conn:
        conn.execute("UPDATE spans SET start_ns = start_ns - 3000000000, end_ns = end_ns - 3000000000 "
                     "WHERE service = 'llmtrace-server'")
    return db


def _diagnose(capsys: pytest.CaptureFixture[str], db: Path) -> list[dict[str, Any]]:
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    findings: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["findings"]
    return findings


def test_findings_and_quoted_traces_do_not_depend_on_the_order_of_the_spans(
        stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, shuffled = stores
    here = _diagnose(capsys, db)
    assert len(here) >= 10  # the planted causes: not an empty comparison
    assert _diagnose(capsys, shuffled) == here
    assert _diagnose(capsys, db) == here  # and a second run of the same store


@pytest.mark.parametrize("which", ["store", "skewed clocks"])
def test_the_ttft_split_of_a_finding_is_the_breakdown_views(stores: tuple[Path, Path], skewed: Path, which: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = stores[0] if which == "store" else skewed
    lines = [e for f in _diagnose(capsys, db) for e in f["evidence"]
             if str(e["label"]).startswith(SPLIT)]
    assert lines, "no finding carries the TTFT split"
    for line in lines:
        ids = list(line["trace_ids"])
        with read_connection(db) as conn:  # the documented view over every span, filtered afterwards
            rows = conn.execute(
                "SELECT t.share, t.ms, p.prompt_tokens - coalesce(p.cached_tokens, 0) FROM ttft_breakdown t "
                "JOIN passes p ON p.server_span_id = t.pass_span_id "
                "WHERE t.component = 'prefill' AND t.share IS NOT NULL AND t.trace_id IN (SELECT unnest(?))",
                [ids]).fetchall()
        assert rows
        share, ms, uncached = (statistics.median(float(r[i] or 0) for r in rows) for i in range(3))
        assert line["label"] == f"{SPLIT} (median of {len(rows)} server passes)"
        assert line["value"] == f"{share:.0%} of TTFT ({ms:,.0f} ms), prefill of {uncached:,.0f} uncached tokens"
