"""Runs the analyzers over one short read-only connection and hands back their (frozen) findings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb

from llmtrace.tracer.store import StoreError, read_connection

from .store_reader import StoreReader, quiet

if TYPE_CHECKING:
    from llmtrace.analyzers.finding import Finding


class AnalyzersUnavailable(RuntimeError):
    """The analyzers package cannot be imported (a broken install); the explorer still works without it."""


def read_findings(reader: StoreReader, symptoms: Sequence[str] | None = None) -> tuple[Finding, ...]:
    try:
        from llmtrace.analyzers import run_analyzers
    except ImportError as exc:  # keep the rest of the explorer usable
        raise AnalyzersUnavailable(f"the analyzers cannot be loaded: {exc}") from None
    try:
        with read_connection(reader.path, timeout_s=reader.timeout_s) as conn:
            quiet(conn)
            return tuple(run_analyzers(conn, list(symptoms) if symptoms is not None else None))
    except duckdb.Error as exc:
        raise StoreError(f"the analyzers could not read {reader.path}: {str(exc).splitlines()[0]}") from None
