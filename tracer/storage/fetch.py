"""The one row a statement is known to return, typed: drivers declare ``fetchone()`` optional, yet an
aggregate (count, min, ...) or a DELETE's count always gives exactly one row. Reading it through here says
so once, and a driver that breaks that promise gets a clear error instead of a TypeError on ``None[0]``."""

from __future__ import annotations

from typing import Any, Protocol


class Fetches(Protocol):
    """What DuckDB's connection and the ClickHouse adapter both answer after ``execute``."""

    def fetchone(self) -> tuple[Any, ...] | None: ...


def first_row(cur: Fetches) -> tuple[Any, ...]:
    """The first row of an executed statement that always returns one."""
    row = cur.fetchone()
    if row is None:
        raise RuntimeError("the statement returned no row where SQL guarantees one")
    return row


def scalar(cur: Fetches) -> Any:
    """The first column of :func:`first_row` (a count, a min, ...)."""
    return first_row(cur)[0]
