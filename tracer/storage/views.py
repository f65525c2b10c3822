"""The store's tables and views. The views are the documented SQL surface (docs/sql.md): keep them stable.

Views are generated from a *source* relation so the same definitions run over the DuckDB file
(``spans``) and over Parquet exports (``read_parquet(...)``).
"""

from __future__ import annotations

import functools
import json

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.model import BoundaryValue
from llmtrace.tracer.registry.stages import PASS_VALUES, STAGES
from llmtrace.tracer.storage.typed_values import read_sql

SCHEMA_VERSION = 9  # bump when a view changes: writers recreate the views (5: views generated from the registry;
# 6: a pass's hit_ratio is NULL where no cached tokens were reported; 7: engine_boot; 8: prompt_tokens by the
# usage block's cache convention; 9: requests.status_message, why a failed pass failed)

SPAN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trace_id", "VARCHAR"),
    ("span_id", "VARCHAR"),
    ("parent_span_id", "VARCHAR"),
    ("name", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("operation", "VARCHAR"),  # gen_ai.operation.name: chat, text_completion, execute_tool, ...
    ("stage", "VARCHAR"),
    ("phase", "VARCHAR"),
    ("service", "VARCHAR"),
    ("deploy", "VARCHAR"),
    ("start_ns", "BIGINT"),
    ("end_ns", "BIGINT"),
    ("duration_ms", "DOUBLE"),
    ("status", "VARCHAR"),
    ("status_message", "VARCHAR"),
    ("attributes", "JSON"),
    ("resource", "JSON"),
    ("events", "JSON"),
)

TABLES_SQL = f"""
CREATE TABLE IF NOT EXISTS spans ({", ".join(f"{n} {t}" for n, t in SPAN_COLUMNS)});
CREATE TABLE IF NOT EXISTS deploys (name VARCHAR, service VARCHAR, at_ns BIGINT, note VARCHAR);
CREATE TABLE IF NOT EXISTS llmtrace_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
"""

# The GenAI operations that are one model pass (the `requests` view, the explorer, the analyzers all use these)
PASS_OPERATION_NAMES = ("chat", "text_completion", "generate_content")
PASS_OPERATIONS = "(" + ", ".join(f"'{op}'" for op in PASS_OPERATION_NAMES) + ")"  # as an SQL list


def stage_catalog_sql() -> str:
    rows = ", ".join(f"({s.number}, '{s.id}', '{s.phase}', '{s.title.replace(chr(39), chr(39) * 2)}')" for s in STAGES)
    return f"SELECT * FROM (VALUES {rows}) AS t(stage_number, stage, phase, title)"


# The pass-span values a view column shows, in the registry's order (tracer/registry/pass_values.py: a value
# with ``column=``). Values whose column is one of the span table's own (``operation``) come from the table.
# A registry value type as an SQL column type (the per-stage dataset's columns); the requests view parses pass
# values with json_transform (its types below).
_SQL_TYPES = {"str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "str[]": "VARCHAR[]",
              "int[]": "BIGINT[]", "float[]": "DOUBLE[]"}
# A list is read as its JSON text ("VARCHAR" takes an array's text, a string as it is): the JSON type made
# json_transform re-serialise the sub-document, a seventh of the whole parse on a 100k-pass store.
_TRANSFORM_TYPES = {**_SQL_TYPES, "str[]": "VARCHAR"}
REQUEST_VALUES = tuple(v for v in PASS_VALUES if v.column and v.column not in {n for n, _ in SPAN_COLUMNS})
# a column read from a second value where the first is missing
_FALLBACK = {N.SESSION_ID: N.GEN_AI_CONVERSATION_ID}
# The pass-summary attributes the `requests` view types, parsed once per row with json_transform
# (one parse instead of one json_extract per column: this is what keeps the view fast on big stores).
# A usage block's cache convention (tracer/collect/otlp_names.py): where input_tokens leave cached tokens out
# (MLflow: reads; Anthropic's API, Bedrock: reads and writes), prompt_tokens adds them back, so the hit rate
# and the cost read the same whichever tool produced the span. Absent (our own spans, OTel GenAI): included.
_CONVENTION, _WRITES = N.USAGE_CACHE_CONVENTION, N.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
REQUEST_ATTRIBUTES: dict[str, str] = {
    **{v.name: _TRANSFORM_TYPES[v.type] for v in REQUEST_VALUES}, **{f: "VARCHAR" for f in _FALLBACK.values()},
    _CONVENTION: "VARCHAR", _WRITES: "BIGINT",
}
_IN, _READ = f'v."{N.GEN_AI_USAGE_INPUT_TOKENS}"', f'v."{N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS}"'
PROMPT_TOKENS_SQL = (f"""(CASE WHEN v."{_CONVENTION}" = 'excluded' THEN {_IN} + coalesce({_READ}, 0) """
                     f"""WHEN v."{_CONVENTION}" = 'excluded_both' THEN {_IN} + coalesce({_READ}, 0) """
                     f"""+ coalesce(v."{_WRITES}", 0) ELSE {_IN} END)""")

# The first finish reason as stored: a JSON list (our spans), a bare string, or a list serialised into a
# string (LiteLLM writes '["length"]'); read as text (above), a list and a list in a string look alike.
_FR = f'v."{N.GEN_AI_RESPONSE_FINISH_REASONS}"'
FIRST_FINISH_REASON = f"CASE WHEN {_FR} LIKE '[%' THEN TRY(json_extract_string({_FR}, '$[0]')) ELSE {_FR} END"


@functools.cache
def normalized_finish_reason_sql(expr: str) -> str:
    """SQL mapping a stored finish reason onto stop, length, tool_calls, content_filter, error or other, with
    the table of tracer/registry/finish_reason.py (OpenAI ``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``
    and ``FinishReason.MAX_TOKENS`` all are the length cap). NULL and empty stay NULL."""
    from llmtrace.tracer.registry.finish_reason import (
        _TABLE,  # the one vocabulary; spelt in SQL here so 100k rows stay fast
    )

    w = f"lower(trim(trim({expr}), '\"'''))"
    w = f"regexp_replace(regexp_replace(replace(replace({w}, '-', '_'), ' ', '_'), '^.*[.]', ''), " \
        f"'^(finish_reason_|stop_reason_)(.)', '\\2')"
    spellings: dict[str, list[str]] = {}
    for word, canon in _TABLE.items():
        spellings.setdefault(canon, []).append(word)

    def lookup(e: str) -> str:
        # one arm per canonical word with its spellings as an IN list: a CASE with an arm per spelling (80 of
        # them, twice) took DuckDB's planner ~15 ms, which every query reading passes paid
        return "CASE " + " ".join(f"WHEN {e} IN ({', '.join(repr(x) for x in words)}) THEN '{canon}'"
                                  for canon, words in spellings.items())

    # plain lower-case words (nearly every stored value) take the direct lookup; only odd spellings pay for
    # the regular expressions (coalesce evaluates its second argument only where the first is NULL; the
    # same fall-through as an ELSE that nests a CASE, which plans four times slower)
    # the two spellings nearly every pass has come first, as themselves (what the lookup gives them)
    return (f"(CASE WHEN {expr} = 'stop' THEN 'stop' WHEN {expr} = 'length' THEN 'length' "
            f"WHEN {expr} IS NULL OR trim({expr}) = '' THEN NULL ELSE coalesce({lookup(expr)} END, "
            f"{lookup(w)} ELSE 'other' END) END)")


def _request_spec() -> str:
    return json.dumps(REQUEST_ATTRIBUTES).replace("'", "''")


def _request_column(v: BoundaryValue) -> str:
    if v.column == "finish_reason":
        return f"{FIRST_FINISH_REASON} AS finish_reason"
    expr = PROMPT_TOKENS_SQL if v.column == "prompt_tokens" else f'v."{v.name}"'
    if v.name in _FALLBACK:
        expr = f'coalesce({expr}, v."{_FALLBACK[v.name]}")'
    sql = f"{expr} AS {v.column}"
    if v.column == "cached_tokens":  # the ratio sits beside the tokens it divides
        sql += f", CASE WHEN {PROMPT_TOKENS_SQL} > 0 THEN {_READ} / {PROMPT_TOKENS_SQL} END AS hit_ratio"
    return sql


def json_values(spec: str, checked: bool = False) -> str:
    """The span's ``attributes`` parsed once into the struct ``spec`` (a quoted json_transform structure).
    A value of another type than the spec's reads as NULL; a document that is not JSON at all (text in a
    Parquet export, where the column is a plain string) would stop the query, so it is wrapped in TRY —
    unless ``checked``: a column of DuckDB's JSON type holds only documents validated when written, and TRY
    costs a tenth of the parse on every row."""
    call = f"json_transform(attributes, '{spec}')"
    return call if checked else f"TRY({call})"


def requests_select(source: str = "spans", json_checked: bool = False) -> str:
    """The ``requests`` view's SELECT over ``source``: one row per pass span (client and server apart), a
    column for every pass value the registry gives one. ``json_checked``: ``source``'s attributes are of
    the JSON type (see :func:`json_values`)."""
    values = ",\n                   ".join(_request_column(v) for v in REQUEST_VALUES)
    return f"""
            SELECT trace_id, span_id, parent_span_id, service, deploy,
                   make_timestamp(start_ns // 1000) AS ts, start_ns, end_ns, duration_ms, status, status_message,
                   operation,
                   {values},
                   attributes
            FROM (SELECT *, {json_values(_request_spec(), json_checked)} AS v FROM {source}
                  WHERE operation IN {PASS_OPERATIONS})"""


# passes: which side's value a logical pass takes. The span's own columns are the client's (the app's
# service, its clock for the call); each value column takes the side its registry entry prefers (``prefer``):
# the server's where it reported one (it sees the engine: real prompt and cached tokens, engine TTFT), else
# the client's.
_CLIENT_FIRST = ("trace_id", "service", "start_ns", "end_ns", "duration_ms", "status", "operation")
_VALUE_COLUMNS = tuple("finish_reason_raw" if v.column == "finish_reason" else str(v.column)  # each has one
                       for v in REQUEST_VALUES if v.column != "side")
_PREFER_CLIENT = {v.column for v in REQUEST_VALUES if v.prefer == "client"}


def hit_rate_sql(cached: str = "cached_tokens", prompt: str = "prompt_tokens") -> str:
    """The hit rate of a group of passes (cached over prompt tokens), the one rule `check`, `diagnose`, the
    explorer and the report share: a pass counts only when its cached tokens were reported. A provider or an
    instrumentation that reports none (openai-v2 records none) gives no hit rate, not 0%."""
    known = f"FILTER (WHERE {prompt} > 0 AND {cached} IS NOT NULL)"
    return f"sum({capped_cached_sql(cached, prompt)}) {known} / nullif(sum({prompt}) {known}, 0)"


def capped_cached_sql(cached: str = "cached_tokens", prompt: str = "prompt_tokens") -> str:
    """A pass's cached tokens, at most its prompt tokens; NULL where none were reported. (DuckDB's ``least``
    skips a NULL argument: ``least(NULL, 300)`` is 300, which would count a pass that reported nothing as a
    full hit; ClickHouse's is NULL. The CASE makes both say "unknown".)"""
    return f"CASE WHEN {cached} IS NOT NULL THEN least({cached}, {prompt}) END"


def _pass_column(c: str) -> str:
    if c == "cached_tokens":  # (NULL where no cached tokens were reported, as in hit_rate_sql)
        return (f"cached_tokens, CASE WHEN prompt_tokens > 0 THEN {capped_cached_sql()}"
                " / prompt_tokens END AS hit_ratio")
    if c == "finish_reason_raw":
        return f"{normalized_finish_reason_sql('finish_reason_raw')} AS finish_reason, finish_reason_raw"
    return c


_DERIVED_BESIDE = {"cached_tokens": ("cached_tokens", "hit_ratio"),
                   "finish_reason_raw": ("finish_reason", "finish_reason_raw")}
PASS_COLUMNS: tuple[str, ...] = (
    "trace_id", "span_id", "client_span_id", "server_span_id", "observed_by", "service", "deploy", "ts",
    *_CLIENT_FIRST[2:], *(n for c in _VALUE_COLUMNS for n in _DERIVED_BESIDE.get(c, (c,))), "client_prompt_tokens")


def passes_select(requests: str = "requests") -> str:
    """The ``passes`` view's SELECT over a relation shaped like ``requests``: one row per logical inference
    pass. A server pass span and the client pass span it hangs under are one pass; a span of either side
    without the other is a pass of its own. The deploy is the trace's (the app's, from its client pass
    spans; a trace the app did not record keeps the server's). This view is read on every `diagnose` and
    `check`, so it is one full outer join over the pass spans (a left join and an anti join read them twice)."""
    client_first = (*_CLIENT_FIRST, *(c for c in _VALUE_COLUMNS if c in _PREFER_CLIENT))
    server_first = tuple(c for c in _VALUE_COLUMNS if c not in _PREFER_CLIENT)
    server = ", ".join(f"coalesce(s.{c}, c.{c}) AS {c}" for c in server_first)
    client = ", ".join(f"coalesce(c.{c}, s.{c}) AS {c}" for c in client_first)
    cols = ", ".join(("span_id", "parent_span_id", "deploy", "side", *_CLIENT_FIRST,
                      *("finish_reason AS finish_reason_raw" if c == "finish_reason_raw" else c
                        for c in _VALUE_COLUMNS)))
    # a pass seen by one side only takes the trace's deploy where its span has none; a joined pass keeps
    # its client's, else its server's
    return f"""
        WITH r AS MATERIALIZED (SELECT {cols} FROM {requests}),
             c AS (SELECT * FROM r WHERE side IS DISTINCT FROM 'server'),
             s AS (SELECT * FROM r WHERE side = 'server'),
             td AS (SELECT trace_id, arg_min(deploy, start_ns) AS deploy FROM c WHERE deploy IS NOT NULL
                    GROUP BY trace_id),
             j AS (SELECT c.span_id AS client_span_id, s.span_id AS server_span_id,
                          CASE WHEN c.span_id IS NULL THEN 'server' WHEN s.span_id IS NULL THEN 'client'
                               ELSE 'both' END AS observed_by,
                          c.deploy AS client_deploy, s.deploy AS server_deploy, c.prompt_tokens AS client_prompt_tokens,
                          {client}, {server}
                   FROM s FULL OUTER JOIN c ON c.span_id = s.parent_span_id AND c.trace_id = s.trace_id)
        SELECT j.trace_id, coalesce(client_span_id, server_span_id) AS span_id, client_span_id, server_span_id,
               observed_by, service,
               coalesce(client_deploy, CASE WHEN client_span_id IS NULL OR server_span_id IS NULL THEN td.deploy END,
                        server_deploy) AS deploy,
               make_timestamp(start_ns // 1000) AS ts,
               {", ".join(_CLIENT_FIRST[2:])},
               {", ".join(_pass_column(c) for c in _VALUE_COLUMNS)}, client_prompt_tokens
        FROM j LEFT JOIN td ON td.trace_id = j.trace_id"""


def passes_from_spans(spans: str = "spans", json_checked: bool = False) -> str:
    """The ``passes`` view's rows built from the span relation ``spans``, as a parenthesized relation: the
    one spelling of "passes over these spans" (the store's view, the kept pass table's build, the analyzers'
    run, the explorer, the report and ``export`` read it; tracer/storage/store.py ``passes_source`` prefers a
    kept table where the store has one). ``json_checked``: see :func:`json_values`."""
    return f"({passes_select('(' + requests_select(spans, json_checked) + ')')})"


def views_sql(source: str = "spans", deploys: str = "deploys") -> list[str]:
    """CREATE VIEW statements for the people-facing views over ``source``."""
    return [
        f"CREATE OR REPLACE VIEW stage_catalog AS {stage_catalog_sql()}",
        f"""CREATE OR REPLACE VIEW stages AS
            SELECT c.stage_number, s.*, s.attributes AS boundary_values
            FROM {source} s JOIN stage_catalog c ON c.stage = s.stage""",
        f"CREATE OR REPLACE VIEW requests AS {requests_select(source)}",
        f"CREATE OR REPLACE VIEW passes AS {passes_select('requests')}",
        f"""CREATE OR REPLACE VIEW traces AS
            SELECT trace_id,
                   make_timestamp(min(start_ns) // 1000) AS ts,
                   min(start_ns) AS start_ns, max(end_ns) AS end_ns,
                   (max(end_ns) - min(start_ns)) / 1e6 AS duration_ms,
                   count(*) AS spans,
                   count(*) FILTER (WHERE operation IN {PASS_OPERATIONS}) AS passes,
                   count(*) FILTER (WHERE operation = 'execute_tool') AS tool_calls,
                   string_agg(DISTINCT service, ',') AS services,
                   any_value(deploy) AS deploy,
                   bool_or(status = 'error') AS has_error,
                   arg_min(name, start_ns) FILTER (WHERE parent_span_id IS NULL) AS root_name
            FROM {source} GROUP BY trace_id""",
        *_time_views_sql(source),
    ]


def _time_views_sql(source: str) -> list[str]:
    from llmtrace.tracer.storage.time_views import time_views_sql  # it reads this module's pass operations

    return time_views_sql(source)


# ── the per-stage dataset `llmtrace export --parquet` writes beside the spans (DIR.stages) ──────────────
# One row per stage span, its declared values (every stage's, from the registry) as typed columns instead of
# JSON: what the analyzers read from stage spans over a whole fleet, without parsing 40 JSON documents a pass.
STAGE_ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trace_id", "VARCHAR"), ("span_id", "VARCHAR"), ("parent_span_id", "VARCHAR"), ("stage", "VARCHAR"),
    ("service", "VARCHAR"), ("deploy", "VARCHAR"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"),
    ("duration_ms", "DOUBLE"), ("status", "VARCHAR"))


@functools.cache
def stage_value_types(stage_id: str) -> dict[str, str]:
    """A stage's declared values (its own and the values common to every stage) -> SQL type: the value
    columns of that stage's rows in the per-stage dataset, named as the attribute is."""
    from llmtrace.tracer.registry.stages import COMMON_VALUES, get_stage

    out: dict[str, str] = {}
    for v in (*get_stage(stage_id).values, *COMMON_VALUES):
        out.setdefault(v.name, _SQL_TYPES[v.type])
    return out


def stage_values_select(stage_id: str, source: str = "spans") -> str:
    """One row per span of stage ``stage_id`` in ``source``: ids, times, and each of the stage's declared values
    typed (NULL where the span does not carry it), parsed with one json_transform a span as the analyzers'
    stage reads do (a spec of one stage's values: the union of every stage's is ten times slower)."""
    types = stage_value_types(stage_id)
    spec = json.dumps(types).replace("'", "''")
    ids = ", ".join(n for n, _ in STAGE_ROW_COLUMNS)
    quoted = {n: '"' + n.replace('"', '""') + '"' for n in types}
    cols = ", ".join(f"{read_sql('v.' + q, n, stage_id)} AS {q}" for n, q in quoted.items())
    sid = stage_id.replace("'", "''")
    return (f"SELECT {ids}, {cols} FROM (SELECT *, TRY(json_transform(attributes, '{spec}')) AS v "
            f"FROM {source} WHERE stage = '{sid}')")
