"""SVG snapshots of the explorer's main screens at 80×24 and 160×48 (pytest-textual-snapshot).

The store is recorded with fixed times and a seeded id generator, and opened by a relative path, so
the screens are the same on every run. After an intended change: pytest tests/tui --snapshot-update.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from llmtrace.tui.app import ExplorerApp

SIZES = [(80, 24), (160, 48)]


@pytest.fixture
def store_here(support_store: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(support_store.parent)
    return support_store.name


def explorer(db: str) -> ExplorerApp:
    app = ExplorerApp(db, analyze_after_s=None)
    app.animation_level = "none"
    return app


async def settled(pilot: Pilot) -> None:
    for _ in range(2):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def after(*keys: str) -> Callable[[Pilot], object]:
    async def run(pilot: Pilot) -> None:
        await settled(pilot)
        for key in keys:
            await pilot.press(key)
            await settled(pilot)

    return run


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_requests_screen(snap_compare, store_here: str, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(explorer(store_here), terminal_size=size, run_before=after())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_waterfall_screen(snap_compare, store_here: str, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    # oldest trace first (i inverts the time sort), open it, walk down to a server stage
    keys = ("i", "enter", "down", "down", "down", "down", "down", "down", "down", "down")
    assert snap_compare(explorer(store_here), terminal_size=size, run_before=after(*keys))


def test_cache_screen(snap_compare, store_here: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(explorer(store_here), terminal_size=(80, 24), run_before=after("c"))


def test_help_screen(snap_compare, store_here: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(explorer(store_here), terminal_size=(80, 24), run_before=after("question_mark"))


def test_empty_store_screen(snap_compare, empty_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(empty_store_path.parent)
    assert snap_compare(explorer(empty_store_path.name), terminal_size=(80, 24), run_before=after())
