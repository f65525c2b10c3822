"""Runs the analyzers over one short read-only connection and hands back their (frozen) findings.

Each symptom's analyzer runs on its own, so one that fails (a bug, a store from another version)
costs only its own findings: the others are still shown, and the failure is reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from llmtrace.tracer.storage.store import StoreError

from .store_reader import StoreReader

if TYPE_CHECKING:
    from llmtrace.analyzers.finding import Finding
    from llmtrace.analyzers.query import Query
    from llmtrace.analyzers.registry import Analyzer

# what one analyzer's failure looks like (on ClickHouse a statement it refuses is a StoreError): it costs
# that analyzer's findings alone
_ANALYZER_ERRORS = (duckdb.Error, ValueError, KeyError, TypeError, AttributeError, StoreError)


class AnalyzersUnavailable(RuntimeError):
    """The analyzers package cannot be imported (a broken install); the explorer still works without it."""


@dataclass(frozen=True, slots=True)
class FindingsResult:
    findings: tuple[Finding, ...]
    failures: tuple[str, ...]  # "symptom: error" for each analyzer that raised


def read_findings(reader: StoreReader, symptoms: Sequence[str] | None = None,
                  progress: Callable[[int, int, str], object] | None = None) -> FindingsResult:
    """Run the analyzers of ``symptoms`` (all when None); ``progress(done, total, symptom)`` before each."""
    try:
        from llmtrace.analyzers import ANALYZERS
        from llmtrace.analyzers.merge import merge_findings
        from llmtrace.analyzers.query import Query
    except ImportError as exc:  # keep the rest of the explorer usable
        raise AnalyzersUnavailable(f"the analyzers cannot be loaded: {exc}") from None
    chosen = list(symptoms) if symptoms is not None else list(ANALYZERS)
    found: list[Finding] = []
    failures: list[str] = []
    # One connection and one Query for the whole refresh, as `diagnose` runs them (analyzers/registry.py
    # run_analyzers): the kept pass table's stamp is checked once (a scan of every pass span) and the passes
    # are read into one table every analyzer shares. A connection per analyzer did both ~20 times a refresh,
    # so a writer waiting for the file waited longer in all than for this one run.
    try:
        with reader.connection(kept_passes=True) as conn:
            q = Query(conn)
            try:
                for i, symptom in enumerate(chosen):
                    if progress is not None:
                        progress(i, len(chosen), symptom)
                    try:
                        found.extend(_run_one(ANALYZERS, conn, q, symptom))
                    except _ANALYZER_ERRORS as exc:
                        first = str(exc).splitlines()[0] if str(exc) else ""
                        failures.append(f"{symptom}: {type(exc).__name__}: {first}")
            finally:
                try:
                    q.release()
                except _ANALYZER_ERRORS:  # the findings are read; a temp table dies with the connection anyway
                    pass
    except duckdb.Error as exc:
        raise StoreError(f"the analyzers could not read {reader}: {str(exc).splitlines()[0]}") from None
    # each analyzer ran on its own (one that fails costs only its findings); findings of one root cause
    # are merged afterwards, as diagnose and check show them
    found = merge_findings(found)
    found.sort(key=lambda f: f.sort_key())
    return FindingsResult(tuple(found), tuple(failures))


def _run_one(analyzers: Mapping[str, Analyzer], conn: duckdb.DuckDBPyConnection, q: Query, symptom: str) -> list[Finding]:
    """One symptom's findings on the shared Query (a name not in the symptom table is a clear KeyError)."""
    from llmtrace.tracer.registry.symptoms import get_symptom

    get_symptom(symptom)
    analyzer = analyzers.get(symptom)
    return [] if analyzer is None else analyzer.analyze(conn, None, query=q)
