"""`llmtrace explore` on the command line: bad stores and bad options are one clear line, exit 2."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from llmtrace.cli import main


def test_missing_store_is_a_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", str(tmp_path / "nope.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmtrace explore: no store at") and "Traceback" not in err


def test_corrupt_and_foreign_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"\x00garbage" * 1000)
    assert main(["explore", "--db", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmtrace explore: ") and "junk.duckdb" in err and "Traceback" not in err
    foreign = tmp_path / "other.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE x (a INT)")
    con.close()
    assert main(["explore", str(foreign)]) == 2
    assert "not an llmtrace store" in capsys.readouterr().err


def test_store_from_environment_and_bad_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLMTRACE_DB", str(tmp_path / "from-env.duckdb"))
    assert main(["explore"]) == 2
    assert "from-env.duckdb" in capsys.readouterr().err
    assert main(["explore", "--interval", "0"]) == 2
    assert "--interval must be positive" in capsys.readouterr().err


def test_help_names_live_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["explore", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--follow" in out and "DB" in out.upper()
