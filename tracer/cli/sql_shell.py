"""The interactive ``llmtrace sql`` shell: readline editing and history, one statement per ``;``.

Each statement opens the store for its own moment (``run_one``), as every llmtrace reader does, so an
open shell never keeps the app's exporter or the collector from writing. The read-only rules are the ones
of a single ``llmtrace sql "..."``: the same function runs each statement.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

HELP = """Enter SQL ending with ';' (a statement may span lines). Views: spans, stages, requests, traces, deploys,
stage_catalog. Read-only: SELECT, WITH ... SELECT, EXPLAIN SELECT, DESCRIBE, SUMMARIZE, SHOW TABLES.
  .tables   list the tables and views      .schema NAME   the columns of one
  .help     this text                      .quit / .exit / ctrl-d   leave"""


def _setup_history() -> Callable[[], None]:
    try:
        import readline
    except ImportError:  # no readline (Windows without pyreadline): still a shell, without history
        return lambda: None
    from llmtrace.tracer.cli.sql import history_path

    path = history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            readline.read_history_file(str(path))
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            readline.write_history_file(str(path))
        except OSError:
            pass  # a read-only home must not turn leaving the shell into an error

    return save


def _dot(command: str) -> str | None:
    """The SQL a dot command stands for; None for one that is handled here."""
    word, _, rest = command.partition(" ")
    if word == ".tables":
        return "SHOW TABLES"
    if word == ".schema":
        name = rest.strip().strip(";").replace("'", "''")
        return f"DESCRIBE {name}" if name else "SHOW ALL TABLES"
    print(HELP if word == ".help" else f"unknown command {word} (.help lists them)")
    return None


def shell(run_one: Callable[[str], int]) -> int:
    save = _setup_history()
    print("llmtrace sql — read-only SQL over the store. End statements with ';', .help for help, .quit to leave.")
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("sql> " if not buffer else "...> ")
            except EOFError:
                print()
                break
            except KeyboardInterrupt:  # ctrl-c drops the statement being typed, as DuckDB's shell does
                print()
                buffer = []
                continue
            stripped = line.strip()
            if not buffer and stripped.startswith("."):
                if stripped.split()[0] in (".quit", ".exit", ".q"):
                    break
                sql = _dot(stripped)
                if sql:
                    run_one(sql)
                continue
            if not stripped and not buffer:
                continue
            buffer.append(line)
            if stripped.endswith(";"):
                text, buffer = "\n".join(buffer), []
                try:
                    run_one(text)
                except KeyboardInterrupt:
                    print("interrupted", file=sys.stderr)
    finally:
        save()
    return 0
