"""The store's tables and views. The views are the documented SQL surface (docs/sql.md): keep them stable.

Views are generated from a *source* relation so the same definitions run over the DuckDB file
(``spans``) and over Parquet exports (``read_parquet(...)``).
"""

from __future__ import annotations

from .stages import STAGES

SCHEMA_VERSION = 1

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

PASS_OPERATIONS = "('chat', 'text_completion', 'generate_content')"


def stage_catalog_sql() -> str:
    rows = ", ".join(f"({s.number}, '{s.id}', '{s.phase}', '{s.title.replace(chr(39), chr(39) * 2)}')" for s in STAGES)
    return f"SELECT * FROM (VALUES {rows}) AS t(stage_number, stage, phase, title)"


def _num(key: str, typ: str = "DOUBLE") -> str:
    return f"TRY_CAST(json_extract_string(attributes, '$.\"{key}\"') AS {typ})"


def _str(key: str) -> str:
    return f"json_extract_string(attributes, '$.\"{key}\"')"


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
                   {_str('llmtrace.side')} AS side,
                   {_str('gen_ai.request.model')} AS model,
                   {_str('gen_ai.response.model')} AS response_model,
                   {_str('gen_ai.provider.name')} AS provider,
                   {_str('llmtrace.replica.id')} AS replica,
                   {_num('gen_ai.usage.input_tokens', 'BIGINT')} AS prompt_tokens,
                   {_num('gen_ai.usage.cache_read.input_tokens', 'BIGINT')} AS cached_tokens,
                   CASE WHEN {_num('gen_ai.usage.input_tokens')} > 0
                        THEN {_num('gen_ai.usage.cache_read.input_tokens')} / {_num('gen_ai.usage.input_tokens')}
                   END AS hit_ratio,
                   {_num('llmtrace.ttft_ms')} AS ttft_ms,
                   {_num('llmtrace.tpot_ms')} AS tpot_ms,
                   {_num('gen_ai.usage.output_tokens', 'BIGINT')} AS output_tokens,
                   json_extract_string(attributes, '$."gen_ai.response.finish_reasons"[0]') AS finish_reason,
                   {_num('gen_ai.request.temperature')} AS temperature,
                   {_num('gen_ai.request.top_p')} AS top_p,
                   {_num('gen_ai.request.seed', 'BIGINT')} AS seed,
                   {_num('gen_ai.request.max_tokens', 'BIGINT')} AS max_tokens,
                   {_num('llmtrace.admission.queue_wait_ms')} AS queue_wait_ms,
                   {_str('llmtrace.batch.composition_hash')} AS composition_hash,
                   {_num('llmtrace.meters.cost_usd')} AS cost_usd,
                   {_str('llmtrace.prompt.hash')} AS prompt_hash,
                   {_str('llmtrace.output.hash')} AS output_hash,
                   attributes
            FROM {source}
            WHERE operation IN {PASS_OPERATIONS}""",
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
