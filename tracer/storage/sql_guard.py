"""What ``llmtrace sql`` lets through: read queries, told apart by DuckDB's own parser, never by a regex.

Two layers, so that one mistake in either is not enough to write anything:

1. ``check_read_only`` classifies every statement with ``duckdb.extract_statements`` (the statement type
   DuckDB itself will execute) and walks the parsed tree of each SELECT (``json_serialize_sql``) so that a
   write hidden in a common table expression (``WITH d AS (DELETE ... RETURNING *) SELECT ...``, which
   DuckDB parses as a SELECT and runs) is refused too. EXPLAIN is allowed only without ANALYZE (which
   executes its statement) and only of a query.
2. The connection itself is locked (``tracer.store.lock_read_only``): the store is opened read-only, external
   access is off except for the Parquet files the user named, and the configuration is locked, so ATTACH,
   COPY, INSTALL, LOAD, read_text('/etc/passwd') and SET fail inside DuckDB even if something got past 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

# The query-node types a read can consist of; anything else (INSERT/UPDATE/DELETE/MERGE nodes) is a write.
_READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
_ANALYZE_WORDS = frozenset({"analyze", "analyse"})
# Functions refused by name: query()/query_table() run SQL text this check never parsed, getenv() reads the
# process environment (absent from DuckDB's Python build today; refused in case a release adds it).
_REFUSED_FUNCTIONS = frozenset({"query", "query_table", "getenv"})


class NotReadOnly(ValueError):
    """A statement that is not a read query; the message is one line for people."""


@dataclass(frozen=True, slots=True)
class Statement:
    text: str
    explain: bool  # EXPLAIN of a query: printed as DuckDB's plan text


def _short(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= 60 else one[:57] + "..."


def _walk(tree: object, nodes: set[str], functions: set[str]) -> None:
    """Collect the query-node types and function names of a parsed tree (json_serialize_sql's form)."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "type" and isinstance(value, str) and value.endswith("_NODE"):
                nodes.add(value)
            elif key == "function_name" and isinstance(value, str):
                functions.add(value.lower())
            else:
                _walk(value, nodes, functions)
    elif isinstance(tree, list):
        for value in tree:
            _walk(value, nodes, functions)


def _check_select(parser: duckdb.DuckDBPyConnection, text: str) -> None:
    row = parser.execute("SELECT json_serialize_sql(?)", [text]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True}
    if tree.get("error"):
        # json_serialize_sql understands every plain query; what it cannot serialize we cannot vouch for.
        raise NotReadOnly(f"cannot verify that this query only reads: {_short(text)}")
    nodes: set[str] = set()
    functions: set[str] = set()
    _walk(tree, nodes, functions)
    writes = sorted(nodes - _READ_NODES)
    if writes:
        kind = writes[0].removesuffix("_QUERY_NODE").removesuffix("_NODE")
        raise NotReadOnly(f"a {kind} inside a query writes: {_short(text)}")
    refused = sorted(functions & _REFUSED_FUNCTIONS)
    if refused:
        raise NotReadOnly(f"{refused[0]}() is not available in llmtrace sql: {_short(text)}")


def _explained(text: str) -> str:
    """The statement an EXPLAIN explains; NotReadOnly for EXPLAIN ANALYZE (it runs the statement)."""
    tokens = [(pos, kind) for pos, kind in duckdb.tokenize(text) if kind != duckdb.token_type.comment]
    starts = [pos for pos, _ in tokens]
    for i, pos in enumerate(starts[1:], start=1):
        word = text[pos:starts[i + 1] if i + 1 < len(starts) else len(text)].strip().strip("(),").lower()
        if word in _ANALYZE_WORDS:
            raise NotReadOnly("EXPLAIN ANALYZE runs its statement; use EXPLAIN without ANALYZE")
        try:
            inner = duckdb.extract_statements(text[pos:])
        except duckdb.Error:
            continue  # still inside EXPLAIN's options, e.g. "(FORMAT json)"
        if len(inner) == 1:
            return text[pos:]
    raise NotReadOnly(f"cannot tell what this EXPLAIN explains: {_short(text)}")


def check_read_only(sql: str) -> list[Statement]:
    """The statements of ``sql`` when every one is a read query; duckdb.ParserException for a syntax error,
    NotReadOnly (naming the first offending statement) for anything else."""
    statements = duckdb.extract_statements(sql)
    if not statements:
        raise NotReadOnly("no statement to run")
    parser = duckdb.connect(":memory:")  # only parses, never sees the store
    try:
        out = []
        for number, st in enumerate(statements, start=1):
            where = f" (statement {number} of {len(statements)})" if len(statements) > 1 else ""
            try:
                if st.type == duckdb.StatementType.SELECT:
                    _check_select(parser, st.query)
                    out.append(Statement(st.query, explain=False))
                elif st.type == duckdb.StatementType.EXPLAIN:
                    inner = _explained(st.query)
                    kinds = [s.type for s in duckdb.extract_statements(inner)]
                    if kinds != [duckdb.StatementType.SELECT]:
                        raise NotReadOnly(f"EXPLAIN is allowed only of a query, not of {_kind(kinds[0])}")
                    _check_select(parser, inner)
                    out.append(Statement(st.query, explain=True))
                else:
                    raise NotReadOnly(f"{_first_word(st.query) or _kind(st.type)} is not a read query: "
                                      f"{_short(st.query)}")
            except NotReadOnly as exc:
                raise NotReadOnly(f"{exc}{where}") from None
        return out
    finally:
        parser.close()


def _first_word(text: str) -> str:
    """The statement's own first keyword (INSTALL, not DuckDB's internal LOAD type), for the message."""
    for pos, kind in duckdb.tokenize(text):
        if kind != duckdb.token_type.comment:
            word = text[pos:].split(None, 1)[0] if text[pos:].strip() else ""
            return word.strip("(;").upper() if word[:1].isalpha() else ""
    return ""


def _kind(statement_type: object) -> str:
    name = str(getattr(statement_type, "name", statement_type))
    return {"MULTI": "PIVOT/multi-part", "VARIABLE_SET": "SET VARIABLE", "EXTENSION": "extension"}.get(name, name)
