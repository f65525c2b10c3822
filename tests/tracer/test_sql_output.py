"""What `llmtrace sql` prints: DuckDB's renderer on a terminal (a real pty), plain complete text when piped,
nested JSON, quiet stops on a closed pipe, whole DuckDB errors, control characters never raw, and the shell."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

import llmtrace
from llmtrace.tracer import recording as rec
from llmtrace.tracer.cli.console import printable

EVIL = "\x1b]0;evil\x07\x9b31m\u202eabc"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtrace.cli", *args], capture_output=True, text=True,
                          timeout=120, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sqlout") / "traces.duckdb"
    llmtrace.init(db=db, deploy="v1", service_name="app")
    for i in range(5):
        with rec.start_pass("smol" if i else EVIL) as p:
            p.set_many({"gen_ai.usage.input_tokens": 128, "gen_ai.usage.cache_read.input_tokens": 96,
                        "llmtrace.ttft_ms": 20.0 + i, "gen_ai.response.finish_reasons": ["stop"]})
    llmtrace.shutdown()
    return db


def on_tty(args: list[str], cols: int = 120, stdin_lines: list[str] | None = None, env: dict[str, str] | None = None,
           timeout: float = 60.0) -> tuple[int, str]:
    """Run the CLI with stdin/stdout/stderr on a real pseudo-terminal of ``cols`` columns; all it printed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    full_env = {**os.environ, "COLUMNS": str(cols), "LINES": "40", "TERM": "xterm", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "llmtrace.cli", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=full_env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    pending = list(stdin_lines or [])
    deadline = time.monotonic() + timeout
    sent = 0
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break  # EIO: the child closed the terminal
            if not data:
                break
            chunks.append(data)
            text = b"".join(chunks)
            if pending and text.count(b"sql> ") + text.count(b"...> ") > sent:
                os.write(master, pending.pop(0).encode())  # the next line once the shell prompts for it
                sent += 1
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_printable_shows_controls() -> None:
    assert printable(EVIL) == "\\x1b]0;evil\\x07\\x9b31m\\u202eabc"
    assert printable("tab\there\nnl é 日本") == "tab\\there\\nnl é 日本"


def test_wide_result_on_a_terminal_is_duckdbs_box(store: Path) -> None:
    rc, out = on_tty(["sql", "--db", str(store), "SELECT * FROM requests LIMIT 5"], cols=120)
    assert rc == 0, out
    lines = out.rstrip("\n").split("\n")
    assert len(lines) < 20, out  # was 21,914 lines with every cell folded
    assert max(len(line) for line in lines) <= 120
    assert "5 rows" in out and "columns (" in out and "…" in out  # DuckDB elided columns and said so
    assert "NULL" in out


def test_control_characters_never_reach_the_terminal(store: Path) -> None:
    rc, out = on_tty(["sql", "--db", str(store), "SELECT name, service FROM spans ORDER BY start_ns LIMIT 2"])
    assert rc == 0 and not any(c in out for c in RAW), repr(out)
    assert "\\x1b]0;evil\\x07\\x9b31m\\u202eabc" in out and "2 rows" in out
    rc, out = on_tty(["sql", "--db", str(store), "--csv", "SELECT name FROM spans"])
    assert rc == 0 and not any(c in out for c in RAW) and "\\x1b]0;evil" in out, repr(out)
    rc, out = on_tty(["sql", "--db", str(store), "--json", "SELECT name FROM spans"])
    assert rc == 0 and not any(c in out for c in RAW), repr(out)
    rc, out = on_tty(["sql", "--db", str(store), f"SELECT '{EVIL}' AS \"{EVIL}\", tsx FROM spans"])
    assert rc == 2 and not any(c in out for c in RAW), repr(out)  # an error message quoting the value


def test_piped_output_is_plain_and_complete(store: Path) -> None:
    r = cli("sql", "--db", str(store), "SELECT * FROM requests ORDER BY start_ns")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.rstrip("\n").split("\n")
    header = lines[0].split("\t")
    described = json.loads(cli("sql", "--db", str(store), "--json", "DESCRIBE requests").stdout)
    assert header == [d["column_name"] for d in described]  # every column
    assert len(lines) == 1 + 5 and all(len(line.split("\t")) == len(header) for line in lines)  # every row
    assert "┌" not in r.stdout and "\x1b" not in r.stdout
    assert "\\x1b]0;evil\\x07" in lines[1]  # still one line per row: escaped, not raw
    nulls = cli("sql", "--db", str(store), "SELECT NULL AS a, '' AS b, 1.5 AS c, [1, 2] AS d")
    assert nulls.stdout.split("\n")[:2] == ["a\tb\tc\td", "NULL\t\t1.5\t[1, 2]"]


def test_piped_csv_keeps_values_and_json_nests_json_columns(store: Path) -> None:
    r = cli("sql", "--db", str(store), "--csv", "SELECT name, NULL AS n FROM spans ORDER BY start_ns LIMIT 1")
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows == [["name", "n"], ["chat " + EVIL, ""]]  # piped CSV is data: exact, quoted by the csv module
    r = cli("sql", "--db", str(store), "--json", "SELECT name, attributes, resource, events, deploy FROM spans LIMIT 1")
    row = json.loads(r.stdout)[0]
    assert isinstance(row["attributes"], dict) and row["attributes"]["gen_ai.usage.input_tokens"] == 128
    assert not isinstance(row["resource"], str) and not isinstance(row["events"], str)
    assert not any(c in r.stdout for c in RAW)  # JSON escapes them (\u001b ... \u009b)


@pytest.mark.parametrize("fmt", ["--csv", "--json", None])
def test_closed_pipe_stops_quietly(store: Path, fmt: str | None) -> None:
    args = [sys.executable, "-m", "llmtrace.cli", "sql", "--db", str(store), *([fmt] if fmt else []),
            "SELECT range AS n, 'x' AS s FROM range(3000000)"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert first and rc == 0 and err == "", (rc, err)


def test_duckdb_errors_are_shown_whole(store: Path) -> None:
    r = cli("sql", "--db", str(store), "SELECT tsx FROM requests")
    assert r.returncode == 2 and "Candidate bindings" in r.stderr and '"ts"' in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("sql", "--db", str(store), "SELEC 1")
    assert r.returncode == 2 and "syntax error" in r.stderr and "LINE 1" in r.stderr


def test_query_from_stdin_when_piped(store: Path) -> None:
    r = cli("sql", "--db", str(store), input="SELECT count(*) AS n FROM requests;\n")
    assert r.returncode == 0 and r.stdout == "n\n5\n", r.stderr


def test_interactive_shell_with_history(store: Path, tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    lines = ["SELECT 41 + 1\n", "  AS answer;\n", "DELETE FROM spans;\n", "SELECT * FROM read_text('/etc/passwd');\n",
             ".tables\n", "SELECT count(*) AS n FROM requests;\n", ".quit\n"]
    rc, out = on_tty(["sql", "--db", str(store)], stdin_lines=lines, env=env)
    assert rc == 0, out
    assert "42" in out and "answer" in out
    assert out.count("refused") == 2  # the same read-only rules as a one-shot query
    assert "requests" in out and re.search(r"│\s+5 │", out), out  # .tables, then the count
    history = (tmp_path / "cache" / "llmtrace" / "sql_history").read_text()
    assert "SELECT count(*) AS n FROM requests;" in history
    # ctrl-d leaves too, and the next shell still has the history file
    rc, out = on_tty(["sql", "--db", str(store)], stdin_lines=["\x04"], env=env)
    assert rc == 0, out
