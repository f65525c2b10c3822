"""The explorer's findings refresh (tui/data/findings_source.py) runs the analyzers as `diagnose` does: one
connection, the kept pass table's stamp checked once, one passes table every analyzer shares, and the
same findings `diagnose` reports; an analyzer that fails costs only its own findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtrace.analyzers import run_analyzers
from llmtrace.tracer.storage import pass_table
from llmtrace.tracer.storage.store import read_store, write_connection
from llmtrace.tui.data.findings_source import read_findings
from llmtrace.tui.data.store_reader import StoreReader


def _key(findings: object) -> list[tuple[object, ...]]:
    return sorted((f.symptom, f.stage, f.title, f.summary, tuple(f.trace_ids)) for f in findings)  # type: ignore[attr-defined]


@pytest.fixture
def fingerprints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the scans that check the kept pass table's stamp (each reads every pass span)."""
    seen: list[int] = []
    real = pass_table.fingerprint

    def counted(conn: object) -> str:
        seen.append(1)
        return real(conn)  # type: ignore[arg-type]

    monkeypatch.setattr(pass_table, "fingerprint", counted)
    return seen


def test_refresh_checks_the_kept_pass_table_once_and_matches_diagnose(support_store: Path,
                                                                      fingerprints: list[int]) -> None:
    with read_store(support_store) as conn:  # what `llmtrace diagnose` reads and runs
        assert pass_table.kept_relation(conn) == "llmtrace_passes", "the recorded store keeps its pass table"
        expected = run_analyzers(conn)
    fingerprints.clear()
    result = read_findings(StoreReader(support_store))
    assert result.failures == ()
    assert result.findings and _key(result.findings) == _key(expected)
    # one stamp check for the whole refresh (it was one per analyzer, 15 scans of the pass spans)
    assert len(fingerprints) == 1


def test_refresh_on_a_stale_pass_table_reads_passes_from_spans_and_still_matches(support_store: Path,
                                                                                  fingerprints: list[int]) -> None:
    # an edit past the writers (a deploy renamed by hand) leaves the table's stamp behind the spans
    with write_connection(support_store) as conn:
        conn.execute("UPDATE spans SET deploy = 'v2-hotfix' WHERE deploy = 'v2'")
    with read_store(support_store) as conn:
        assert pass_table.kept_relation(conn) is None
        expected = run_analyzers(conn)
    fingerprints.clear()
    result = read_findings(StoreReader(support_store))
    assert _key(result.findings) == _key(expected)
    assert any("v2-hotfix" in f.summary or "v2-hotfix" in f.title for f in result.findings), \
        "the findings name the deploy as the spans now hold it, not the stale table's"
    assert len(fingerprints) == 1


def test_a_failing_analyzer_costs_only_its_findings(support_store: Path) -> None:
    progress: list[tuple[int, int, str]] = []
    result = read_findings(StoreReader(support_store), ["no_such_symptom", "cost_after_deploy"],
                           progress=lambda i, n, s: progress.append((i, n, s)))
    assert len(result.failures) == 1 and result.failures[0].startswith("no_such_symptom: KeyError")
    assert any(f.symptom == "cost_after_deploy" for f in result.findings)
    assert progress == [(0, 2, "no_such_symptom"), (1, 2, "cost_after_deploy")]
