"""The request filter box's little language, compiled to a parameterised SQL ``WHERE`` clause.

    ttft>2s  tpot>=40ms  finish=length  deploy=v2  hit<50%  prompt>1000  model~smol  trace=4bf9,a1c2  since=2h
    slow-model            (a bare word matches model, deploy, replica, finish reason, service or trace id)

Terms are AND-ed. Durations take us/ms/s/m (bare numbers are ms), ratios take 0.5 or 50%, strings
compare case-insensitively; ``=`` with commas means "any of", ``~`` means "contains".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from llmtrace.tracer.cli.timewindow import parse_since
from llmtrace.tracer.registry.finish_reason import normalize_finish_reason
from llmtrace.tracer.registry.model import BoundaryValue
from llmtrace.tracer.registry.pass_values import VIEW_COLUMNS
from llmtrace.tracer.storage.views import REQUEST_VALUES, normalized_finish_reason_sql

Kind = Literal["duration", "count", "ratio", "money", "text", "id", "since", "finish"]


class FilterError(ValueError):
    """The filter text cannot be understood; the message says which term and why."""


@dataclass(frozen=True, slots=True)
class Field:
    column: str
    kind: Kind
    help: str


# Every column of the ``requests`` view is a filter field, named by its column less the unit suffix
# (ttft_ms -> ttft, prompt_tokens -> prompt, cost_usd -> cost), its kind and help from the registry: a value
# declared with a view column there is filterable here with no further edit.
_SUFFIXES = ("_wait_ms", "_ms", "_tokens", "_usd", "_ratio", "_reason", "_id")
_SPAN_COLUMNS = ("duration_ms", "deploy", "service", "status", "trace_id")


def _short(column: str) -> str:
    return next((column[: -len(x)] for x in _SUFFIXES if column.endswith(x)), column)


def _kind(column: str, value: BoundaryValue | None) -> Kind:
    special: dict[str, Kind] = {"hit_ratio": "ratio", "finish_reason": "finish", "trace_id": "id"}
    if column in special:
        return special[column]
    unit, type_ = (value.unit, value.type) if value is not None else ("ms" if column.endswith("_ms") else "", "str")
    if unit == "ms":
        return "duration"
    if unit == "USD":
        return "money"
    return "count" if type_ in ("int", "float") else "text"


def _fields() -> dict[str, Field]:
    by_column = {v.column: v for v in REQUEST_VALUES if v.column}
    columns = [*(v.column for v in REQUEST_VALUES if v.column), "hit_ratio", *_SPAN_COLUMNS]
    out: dict[str, Field] = {}
    for column in columns:
        value = by_column.get(column)
        meaning = value.meaning if value is not None else VIEW_COLUMNS[column]
        out[_short(column)] = Field(column, _kind(column, value), meaning)
    out["since"] = Field("start_ns", "since", "passes from this window: since=30m, since=7d, since=2026-11-30")
    return out


FIELDS: dict[str, Field] = _fields()
ALIASES = {"out": "output", "dur": "duration", "hit_ratio": "hit", "version": "deploy",
           **{c: _short(c) for c in (f.column for f in FIELDS.values()) if _short(c) != c}}
FREE_TEXT_COLUMNS = ("model", "deploy", "replica", "finish_reason", "service", "trace_id")

_TERM = re.compile(r"^(?P<field>[A-Za-z_]+)\s*(?P<op>>=|<=|!=|=|>|<|~)\s*(?P<value>.*)$")
_DURATION = re.compile(r"^(?P<num>[0-9]*\.?[0-9]+)\s*(?P<unit>us|µs|ms|s|m|min)?$")
_UNIT_MS = {None: 1.0, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0}


@dataclass(frozen=True, slots=True)
class CompiledFilter:
    text: str
    where: str  # "" when the filter is empty
    params: tuple[object, ...]

    @property
    def empty(self) -> bool:
        return not self.where


def compile_filter(text: str) -> CompiledFilter:
    """Turn filter text into SQL; raises FilterError with a message meant for the person typing."""
    try:
        terms = shlex.split(text)
    except ValueError as exc:
        raise FilterError(f"unbalanced quotes: {exc}") from None
    clauses: list[str] = []
    params: list[object] = []
    for term in terms:
        m = _TERM.match(term)
        if m is None:
            like = f"%{term.lower()}%"
            clauses.append("(" + " OR ".join(f"lower({c}) LIKE ?" for c in FREE_TEXT_COLUMNS) + ")")
            params.extend([like] * len(FREE_TEXT_COLUMNS))
            continue
        name = m["field"].lower()
        name = ALIASES.get(name, name)
        field = FIELDS.get(name)
        if field is None:
            raise FilterError(f"unknown field {m['field']!r} in {term!r}; fields: {', '.join(FIELDS)}")
        clause, values = _compile_term(field, m["op"], m["value"].strip(), term)
        clauses.append(clause)
        params.extend(values)
    return CompiledFilter(text, " AND ".join(clauses), tuple(params))


def _compile_term(field: Field, op: str, raw: str, term: str) -> tuple[str, list[object]]:
    if raw == "":
        raise FilterError(f"{term!r} has no value")
    col = field.column
    if field.kind == "since":  # the same --since values as sql, diagnose and check
        if op != "=":
            raise FilterError(f"{term!r}: since takes =, e.g. since=2h")
        try:
            return f"{col} >= ?", [parse_since(raw)]
        except ValueError as exc:
            raise FilterError(str(exc)) from None
    if field.kind == "finish":  # compared on the one vocabulary of tracer/registry/finish_reason.py
        if op not in ("=", "!="):
            raise FilterError(f"{term!r}: finish takes = or !=, e.g. finish=length")
        wanted = sorted({normalize_finish_reason(v.strip()) or v.strip().lower() for v in raw.split(",") if v.strip()})
        marks = ", ".join("?" for _ in wanted)
        expr = normalized_finish_reason_sql(col)
        if op == "=":
            return f"{expr} IN ({marks})", list(wanted)
        return f"({col} IS NULL OR {expr} NOT IN ({marks}))", list(wanted)
    if field.kind in ("text", "id"):
        if op in (">", "<", ">=", "<="):
            raise FilterError(f"{term!r}: {op} does not apply to text; use =, != or ~")
        if op == "~":
            return f"lower({col}) LIKE ?", [f"%{raw.lower()}%"]
        values = [v.strip().lower() for v in raw.split(",") if v.strip()]
        if field.kind == "id":
            like = " OR ".join(f"{col} LIKE ?" for _ in values)
            clause = f"({like})" if op == "=" else f"NOT ({like})"
            return clause, [f"{v}%" for v in values]
        marks = ", ".join("?" for _ in values)
        if op == "=":
            return f"lower({col}) IN ({marks})", list(values)
        return f"({col} IS NULL OR lower({col}) NOT IN ({marks}))", list(values)
    if op == "~":
        raise FilterError(f"{term!r}: ~ (contains) applies to text fields only")
    number = _number(field.kind, raw, term)
    sql_op = "<>" if op == "!=" else op
    return f"{col} {sql_op} ?", [number]


def _number(kind: Kind, raw: str, term: str) -> float:
    text = raw.lower().replace("_", "")
    try:
        if kind == "duration":
            m = _DURATION.match(text)
            if m is None:
                raise ValueError
            return float(m["num"]) * _UNIT_MS[m["unit"]]
        if kind == "ratio":
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        if kind == "money":
            return float(text.lstrip("$"))
        return float(text.replace("k", "e3"))
    except ValueError:
        unit_hint = {"duration": "like 2s or 150ms", "ratio": "like 0.5 or 50%", "money": "like 0.01",
                     "count": "a number"}[kind]
        raise FilterError(f"{term!r}: {raw!r} is not {unit_hint}") from None


def filter_help() -> list[tuple[str, str]]:
    """(field, meaning) pairs for the help screen."""
    return [(name, f.help) for name, f in FIELDS.items()]
