"""The Cache tab (StoreReader.cache_report) reads the pass rows the store keeps, as the analyzers' Query does,
when they are current; a store without them (or whose stamp is behind) builds the passes from the spans."""

from __future__ import annotations

from pathlib import Path

import duckdb

from llmtrace.tracer.storage.store import write_connection
from llmtrace.tui.data.store_reader import StoreReader


def _hits(path: Path, table: str) -> dict[str, float]:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        rows = conn.execute(f"SELECT coalesce(deploy, '(none)'), sum(least(cached_tokens, prompt_tokens)) / "
                            f"nullif(sum(prompt_tokens), 0) FROM {table} GROUP BY 1").fetchall()
    finally:
        conn.close()
    return {str(d): round(float(h), 6) for d, h in rows}


def _tab(path: Path) -> dict[str, float]:
    return {c.deploy: round(float(c.hit_rate or 0.0), 6) for c in StoreReader(path).cache_report().costs}


def test_cache_tab_reads_the_kept_pass_rows_when_current(support_store: Path) -> None:
    from_spans = _tab(support_store)
    assert from_spans == _hits(support_store, "passes") and from_spans["v1"] > 0.5
    # The kept table is what the analyzers read while its stamp (over the spans) is current: the Cache tab
    # must read the same rows, so the two cannot disagree. Here the table is made to differ from the spans
    # (an edit to the table alone leaves the stamp current) to see which one the tab reads.
    with write_connection(support_store) as conn:
        conn.execute("UPDATE llmtrace_passes SET cached_tokens = cached_tokens // 2")
    kept = _hits(support_store, "llmtrace_passes")
    assert kept != from_spans
    assert _tab(support_store) == kept


def test_cache_tab_builds_passes_from_spans_when_the_stamp_is_behind(support_store: Path) -> None:
    with write_connection(support_store) as conn:
        conn.execute("UPDATE llmtrace_passes SET cached_tokens = 0")
        conn.execute("UPDATE spans SET deploy = 'v2-hotfix' WHERE deploy = 'v2'")  # past the writer: stamp behind
    tab = _tab(support_store)
    assert tab == _hits(support_store, "passes") and set(tab) == {"v1", "v2-hotfix"} and tab["v1"] > 0.5
