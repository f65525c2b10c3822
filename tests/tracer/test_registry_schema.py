"""The registry is the schema: every column of every view is explained from it, and docs/views.md is
generated from it and the views' own definitions."""

from __future__ import annotations

from pathlib import Path

from llmtrace.tracer.cli.stages import render_views_markdown, view_columns

ROOT = Path(__file__).resolve().parents[2]


def test_every_view_column_has_a_meaning() -> None:
    missing = {view: [c for c, _, meaning in cols if not meaning] for view, cols in view_columns().items()}
    assert not any(missing.values()), f"declare these (a value's column=, or pass_values.VIEW_COLUMNS): {missing}"


def test_docs_views_md_is_generated() -> None:
    committed = (ROOT / "docs" / "views.md").read_text()
    assert committed == render_views_markdown(), "docs/views.md is stale: run `llmtrace stages --views-markdown > docs/views.md`"
