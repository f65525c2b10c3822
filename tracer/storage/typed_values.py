"""The typed read API: a reader names a value by its generated constant (tracer/registry/names.py) and the
registry gives its type, never the reader. ``typed`` turns ``{alias: name}`` into ``{alias: (name, type)}`` for
one stage (a name the stage does not declare is an error, so a misspelt or misplaced read fails loudly instead
of reading NULL forever); ``attr`` is the SQL of one attribute, typed as declared."""

from __future__ import annotations

import json
from collections.abc import Mapping

from llmtrace.tracer.registry.stages import COMMON_VALUES, BoundaryValue, declared_value, get_stage

# A registry value type as an SQL type (json_transform structures, CASTs, the per-stage dataset's columns).
SQL_TYPES = {"str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "str[]": "VARCHAR[]",
             "int[]": "BIGINT[]", "float[]": "DOUBLE[]"}

# alias -> a value name (its type from the registry), or, for readers not yet moved, (name, type) spelt by hand
ValueSpec = Mapping[str, "str | tuple[str, str]"]


class UndeclaredValueError(KeyError):
    """A reader asked for a value the registry does not declare (on that stage)."""


def declaration(name: str, stage_id: str | None = None) -> BoundaryValue:
    """The registry's declaration of value ``name``: as ``stage_id`` declares it (its own values and the values
    common to every stage), or, without a stage, as any catalog does."""
    if stage_id is not None:
        found = get_stage(stage_id).value(name) or next((v for v in COMMON_VALUES if v.name == name), None)
        if found is None:
            raise UndeclaredValueError(f"stage {stage_id} declares no value {name!r} (tracer/registry/catalog)")
        return found
    declared = declared_value(name)
    if declared is None:
        raise UndeclaredValueError(f"no catalog declares the value {name!r} (tracer/registry)")
    return declared


def value_type(name: str, stage_id: str | None = None) -> str:
    """The registry type of value ``name`` (see :func:`declaration`)."""
    return declaration(name, stage_id).type


def _declared_or_text(name: str) -> str:
    try:
        return value_type(name)
    except UndeclaredValueError:
        if name.startswith("llmtrace."):
            raise
        return "str"


def read_sql(expr: str, name: str, stage_id: str | None = None) -> str:
    """``expr`` (value ``name`` read typed) with the registry's "none" sentinel, where it declares one, read as
    NULL: a reader sees None for "not observed", never the -1 a writer stores."""
    try:
        none = declaration(name, stage_id).none_value
    except UndeclaredValueError:
        return expr
    return expr if none is None else f"nullif({expr}, {int(none)})"


def typed(stage_id: str, values: ValueSpec) -> dict[str, tuple[str, str]]:
    """``{alias: (name, registry type)}`` for values read from ``stage_id``'s spans."""
    return {alias: (v, value_type(v, stage_id)) if isinstance(v, str) else (v[0], v[1]) for alias, v in values.items()}


def struct_spec(values: Mapping[str, tuple[str, str]]) -> str:
    """A json_transform structure for typed (name, type) values, quoted for SQL."""
    return json.dumps({n: SQL_TYPES[t] for n, t in values.values()}).replace("'", "''")


def attr(name: str, typ: str | None = None, column: str = "attributes") -> str:
    """SQL for one attribute of a span, typed as the registry declares ``name`` (``typ`` only where a reader
    deliberately reads it otherwise, e.g. a number as its text). A list reads as its elements' text. A name of
    another vocabulary the registry does not declare (OpenTelemetry's ``error.type``) reads as text; an
    undeclared ``llmtrace.*`` name is a typo, and an error."""
    typ = typ or _declared_or_text(name)
    key = name.replace("'", "''")
    if typ.endswith("[]"):
        return f"json_extract_string({column}, '$.\"{key}\"[*]')"
    text = f"json_extract_string({column}, '$.\"{key}\"')"
    if typ == "str":
        return text
    return read_sql(f"TRY_CAST({text} AS {SQL_TYPES[typ]})", name)
