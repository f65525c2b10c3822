"""A statement that opens with a comment is still a query on ClickHouse: its rows come back (an analyzer's SQL
that said why it counts runs, not spans, in a leading `--` line returned nothing on chdb and lost a finding)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("chdb")

from llmtrace.tracer.storage.clickhouse import connect  # noqa: E402


@pytest.mark.parametrize("lead", ["", "-- why\n", "  -- one\n  -- two\n", "/* a note */ ", "/* two\nlines */\n-- and one\n"])
def test_a_query_after_comments_returns_its_rows(tmp_path: Path, lead: str) -> None:
    with connect(f"chdb://{tmp_path / 'ch'}") as ch:
        assert ch.execute(f"{lead}SELECT number AS x FROM system.numbers LIMIT 2").fetchall() == [(0,), (1,)]
