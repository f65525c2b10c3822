"""The store's tables and views. The views are the documented SQL surface (docs/sql.md): keep them stable.

Views are generated from a *source* relation so the same definitions run over the DuckDB file
(``spans``) and over Parquet exports (``read_parquet(...)``).
"""

from __future__ import annotations

import json

from .stages import STAGES

SCHEMA_VERSION = 2  # bump when a view changes: writers recreate the views

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


# The pass-summary attributes the `requests` view types, parsed once per row with json_transform
# (one parse instead of one json_extract per column: this is what keeps the view fast on big stores).
REQUEST_ATTRIBUTES: dict[str, str] = {
    "llmtrace.side": "VARCHAR", "gen_ai.request.model": "VARCHAR", "gen_ai.response.model": "VARCHAR",
    "gen_ai.provider.name": "VARCHAR", "llmtrace.replica.id": "VARCHAR", "gen_ai.usage.input_tokens": "BIGINT",
    "gen_ai.usage.cache_read.input_tokens": "BIGINT", "llmtrace.ttft_ms": "DOUBLE", "llmtrace.tpot_ms": "DOUBLE",
    "gen_ai.usage.output_tokens": "BIGINT", "gen_ai.response.finish_reasons": "VARCHAR[]",
    "gen_ai.request.temperature": "DOUBLE", "gen_ai.request.top_p": "DOUBLE", "gen_ai.request.seed": "BIGINT",
    "gen_ai.request.max_tokens": "BIGINT", "llmtrace.admission.queue_wait_ms": "DOUBLE",
    "llmtrace.batch.composition_hash": "VARCHAR", "llmtrace.meters.cost_usd": "DOUBLE",
    "llmtrace.prompt.hash": "VARCHAR", "llmtrace.output.hash": "VARCHAR",
}


def _request_spec() -> str:
    return json.dumps(REQUEST_ATTRIBUTES).replace("'", "''")


def views_sql(source: str = "spans", deploys: str = "deploys") -> list[str]:
    """CREATE VIEW statements for the people-facing views over ``source``."""
    return [
        f"CREATE OR REPLACE VIEW stage_catalog AS {stage_catalog_sql()}",
        f"""CREATE OR REPLACE VIEW stages AS
            SELECT c.stage_number, s.*, s.attributes AS boundary_values
            FROM {source} s JOIN stage_catalog c ON c.stage = s.stage""",
        f"""CREATE OR REPLACE VIEW requests AS
            SELECT trace_id, span_id, parent_span_id, service, deploy,
                   make_timestamp(start_ns // 1000) AS ts, start_ns, end_ns, duration_ms, status, operation,
                   v."llmtrace.side" AS side, v."gen_ai.request.model" AS model,
                   v."gen_ai.response.model" AS response_model, v."gen_ai.provider.name" AS provider,
                   v."llmtrace.replica.id" AS replica, v."gen_ai.usage.input_tokens" AS prompt_tokens,
                   v."gen_ai.usage.cache_read.input_tokens" AS cached_tokens,
                   CASE WHEN v."gen_ai.usage.input_tokens" > 0
                        THEN v."gen_ai.usage.cache_read.input_tokens" / v."gen_ai.usage.input_tokens" END AS hit_ratio,
                   v."llmtrace.ttft_ms" AS ttft_ms, v."llmtrace.tpot_ms" AS tpot_ms,
                   v."gen_ai.usage.output_tokens" AS output_tokens,
                   v."gen_ai.response.finish_reasons"[1] AS finish_reason,
                   v."gen_ai.request.temperature" AS temperature, v."gen_ai.request.top_p" AS top_p,
                   v."gen_ai.request.seed" AS seed, v."gen_ai.request.max_tokens" AS max_tokens,
                   v."llmtrace.admission.queue_wait_ms" AS queue_wait_ms,
                   v."llmtrace.batch.composition_hash" AS composition_hash,
                   v."llmtrace.meters.cost_usd" AS cost_usd, v."llmtrace.prompt.hash" AS prompt_hash,
                   v."llmtrace.output.hash" AS output_hash, attributes
            FROM (SELECT *, TRY(json_transform(attributes, '{_request_spec()}')) AS v FROM {source}
                  WHERE operation IN {PASS_OPERATIONS})""",
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
    ]
