"""Runs the analyzers over one short read-only connection and hands back their (frozen) findings.

Each symptom's analyzer runs on its own, so one that fails (a bug, a store from another version)
costs only its own findings: the others are still shown, and the failure is reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from llmtrace.tracer.storage.store import StoreError

from .store_reader import StoreReader

if TYPE_CHECKING:
    from llmtrace.analyzers.finding import Finding


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
        from llmtrace.analyzers import ANALYZERS, run_analyzers
    except ImportError as exc:  # keep the rest of the explorer usable
        raise AnalyzersUnavailable(f"the analyzers cannot be loaded: {exc}") from None
    chosen = list(symptoms) if symptoms is not None else list(ANALYZERS)
    found: list[Finding] = []
    failures: list[str] = []
    for i, symptom in enumerate(chosen):
        if progress is not None:
            progress(i, len(chosen), symptom)
        # A connection per analyzer: on a big store they take seconds each, and a writer waiting for the
        # file should wait for one of them, not for all.
        try:
            with reader.connection(kept_passes=True) as conn:
                try:
                    found.extend(run_analyzers(conn, [symptom]))
                except (duckdb.Error, ValueError, KeyError, TypeError, AttributeError, StoreError) as exc:
                    # (on ClickHouse a statement it refuses is a StoreError: this analyzer's failure alone)
                    first = str(exc).splitlines()[0] if str(exc) else ""
                    failures.append(f"{symptom}: {type(exc).__name__}: {first}")
        except duckdb.Error as exc:
            raise StoreError(f"the analyzers could not read {reader}: {str(exc).splitlines()[0]}") from None
    # each analyzer ran on its own (one that fails costs only its findings); findings of one root cause
    # are merged afterwards, as diagnose and check show them
    from llmtrace.analyzers.merge import merge_findings

    found = merge_findings(found)
    found.sort(key=lambda f: f.sort_key())
    return FindingsResult(tuple(found), tuple(failures))
