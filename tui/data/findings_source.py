"""Runs the analyzers over one short read-only connection and hands back their (frozen) findings.

Each symptom's analyzer runs on its own, so one that fails (a bug, a store from another version)
costs only its own findings: the others are still shown, and the failure is reported beside them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb

from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui.data.store_reader import StoreReader

if TYPE_CHECKING:
    from llmtrace.analyzers.core.base import Analyzer
    from llmtrace.analyzers.core.finding import Finding
    from llmtrace.analyzers.core.query import Query

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
        from llmtrace.analyzers.core.concurrent_run import analyze_all
        from llmtrace.analyzers.core.merge import merge_findings
        from llmtrace.analyzers.core.query import Query
    except ImportError as exc:  # keep the rest of the explorer usable
        raise AnalyzersUnavailable(f"the analyzers cannot be loaded: {exc}") from None
    chosen = list(symptoms) if symptoms is not None else list(ANALYZERS)
    found: list[Finding] = []
    # One connection and one Query for the whole refresh, as `diagnose` runs them (analyzers/diagnose/registry.py
    # run_analyzers): the kept pass table's stamp is checked once (a scan of every pass span) and the passes
    # are read into one table every analyzer shares. A connection per analyzer did both ~20 times a refresh,
    # so a writer waiting for the file waited longer in all than for this one run. Several analyzers run at
    # once, as in diagnose (analyzers/core/concurrent_run.py).
    run = _Refresh(ANALYZERS, len(chosen), progress)
    try:
        with reader.connection(kept_passes=True) as conn:
            q = Query(conn)
            try:
                for got in analyze_all(q, [_Isolated(run, s, i) for i, s in enumerate(chosen)]):
                    found.extend(got)
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
    return FindingsResult(tuple(found), tuple(f for f in run.failures if f))


@dataclass(slots=True)
class _Refresh:
    """What the analyzers of one refresh share: progress counted as each starts, and each one's failure in
    its place in the list (threads finish in any order)."""

    analyzers: Mapping[str, Analyzer]
    total: int
    progress: Callable[[int, int, str], object] | None
    failures: list[str] = field(init=False)
    started: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.failures = [""] * self.total  # one place per analyzer, filled where one fails


@dataclass(slots=True)
class _Isolated:
    """One symptom's analyzer as the refresh runs it: a failure costs its findings alone and is kept."""

    run: _Refresh
    symptom: str
    index: int  # its place in the refresh's list (failures are reported in that order)
    reads_passes: bool = True

    def __post_init__(self) -> None:
        analyzer = self.run.analyzers.get(self.symptom)
        self.reads_passes = analyzer is None or analyzer.reads_passes

    def analyze(self, conn: duckdb.DuckDBPyConnection, since_ns: int | None = None,
                query: Query | None = None) -> list[Finding]:
        run = self.run
        with run.lock:
            i, run.started = run.started, run.started + 1
        if run.progress is not None:
            run.progress(i, run.total, self.symptom)
        from llmtrace.tracer.registry.symptoms import get_symptom

        try:
            get_symptom(self.symptom)  # a name not in the symptom table is a clear KeyError
            analyzer = run.analyzers.get(self.symptom)
            return [] if analyzer is None else analyzer.analyze(conn, since_ns, query=query)
        except _ANALYZER_ERRORS as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            run.failures[self.index] = f"{self.symptom}: {type(exc).__name__}: {first}"
            return []
