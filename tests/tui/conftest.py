"""Stores for the explorer tests: one recorded support-agent store shared by the session (the explorer
only reads it), plus an empty one and broken ones made per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tui_store import empty_store, record_support_store


@pytest.fixture(scope="session")
def support_store_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_support_store(tmp_path_factory.mktemp("tui-store") / "support.duckdb")


@pytest.fixture
def support_store(support_store_master: Path, tmp_path: Path) -> Path:
    """A private copy, so a test that writes (live mode) never changes what the others see."""
    path = tmp_path / "support.duckdb"
    shutil.copyfile(support_store_master, path)
    return path


@pytest.fixture
def empty_store_path(tmp_path: Path) -> Path:
    return empty_store(tmp_path / "empty.duckdb")
