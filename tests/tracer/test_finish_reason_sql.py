"""The `passes` view's finish-reason SQL maps every spelling as tracer/registry/finish_reason.py does.

The view spells the vocabulary in SQL (a Python call per row would be slow on 100k passes), so the two
must agree: every word of the table in the cases it comes in, and the odd spellings the SQL path rewrites.
"""

from __future__ import annotations

import duckdb
import pytest

from llmtrace.tracer.registry.finish_reason import _TABLE, normalize_finish_reason
from llmtrace.tracer.storage.views import normalized_finish_reason_sql

ODD = ["  Length ", "End-Turn", "FINISH_REASON_STOP", "FinishReason.MAX_TOKENS", "STOP_REASON_MAX_TOKENS",
       "'stop'", '"length"', "tool use", "sleepy", "", "   ", None, "Max-Output-Tokens", "google.FinishReason.SAFETY"]


@pytest.mark.parametrize("spelling", ["lower", "upper", "title"])
def test_every_word_of_the_table_maps_in_sql_as_in_python(spelling: str) -> None:
    words = [getattr(w, spelling)() for w in _TABLE]
    _assert_same(words)


def test_odd_spellings_map_in_sql_as_in_python() -> None:
    _assert_same(ODD)


def _assert_same(values: list[str | None]) -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t (i INTEGER, fr VARCHAR)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(values)))
    rows = conn.execute(f"SELECT fr, {normalized_finish_reason_sql('fr')} FROM t ORDER BY i").fetchall()
    got = {fr: out for fr, out in rows}
    want = {v: normalize_finish_reason(v) for v in values}
    assert got == want
