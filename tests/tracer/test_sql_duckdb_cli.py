"""The DuckDB CLI that docs/sql.md names opens the store; an older one refuses it the way the docs say.

The CLI is found as $LLMTRACE_DUCKDB_CLI, ``duckdb`` on PATH, or the ``duckdb_cli`` PyPI package. It is not a
dependency: PyPI's duckdb-cli lags the duckdb Python package (1.5.6 there while this venv has 2.0.x), so the
test skips, naming what to install, only when no CLI is installed at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

import llmtrace
from llmtrace.tracer import recording as rec

ROOT = Path(__file__).resolve().parents[2]


def _cli() -> str | None:
    if os.environ.get("LLMTRACE_DUCKDB_CLI"):
        return os.environ["LLMTRACE_DUCKDB_CLI"]
    if found := shutil.which("duckdb"):
        return found
    try:
        import duckdb_cli  # type: ignore[import-not-found]
    except ImportError:
        return None
    binary = Path(duckdb_cli.__file__).parent / "duckdb"
    return str(binary) if binary.exists() else None


def _minor(version: str) -> tuple[int, int]:
    m = re.search(r"(\d+)\.(\d+)", version)
    assert m, version
    return int(m.group(1)), int(m.group(2))


def test_docs_name_the_cli_release_for_this_duckdb() -> None:
    major, minor = _minor(duckdb.__version__)
    text = (ROOT / "docs" / "sql.md").read_text()
    assert f"DuckDB CLI {major}.{minor}" in text, "docs/sql.md must name the CLI release that opens the store"


def test_duckdb_cli_opens_the_store(tmp_path: Path) -> None:
    cli = _cli()
    if cli is None:
        pytest.skip(f"no DuckDB CLI installed: the store written by duckdb {duckdb.__version__} needs the DuckDB CLI "
                    f"{'.'.join(map(str, _minor(duckdb.__version__)))} (pip index versions duckdb-cli; "
                    "or set LLMTRACE_DUCKDB_CLI)")
    db = tmp_path / "traces.duckdb"
    llmtrace.init(db=db, service_name="app")
    with rec.start_pass("smol") as p:
        p.set_many({"gen_ai.usage.input_tokens": 3})
    llmtrace.shutdown()
    version = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30).stdout
    r = subprocess.run([cli, "-readonly", "-csv", str(db), "-c", "SELECT count(*) AS n FROM spans"],
                       capture_output=True, text=True, timeout=60)
    if _minor(version) >= _minor(duckdb.__version__):
        assert r.returncode == 0 and r.stdout.split() == ["n", "1"], r.stderr
    else:
        # The docs say an older CLI cannot read it; this is that message, so the docs stay true.
        assert r.returncode != 0 and "version number" in r.stderr and "newer version of DuckDB" in r.stderr, r.stderr
