"""Tool spans that repeat, for agent_loops: a loop is the same tool over the same or near-same arguments, or calls
that make no progress: the same error, or the same result, again and again whatever they asked. One tool over
distinct arguments with distinct results is fan-out, the work asked for.

Read from the digests the app helpers and the collector write (tracer/reading/tool_digest.py): the arguments'
(``llmtrace.tool.arguments_hash``), the result's or the error's without the call's own words
(``llmtrace.tool.result_hash``) and the result's kind (``llmtrace.tool.result_kind``). No text.

Three ways a call repeats an earlier one of the same tool in one trace, each counted where REPEATS calls or more
share it:
    args     the same (or near-same) arguments;
    error    the same error (it raised, its span failed, or its result says so), whatever it asked;
    result   the same result, whatever it asked, after the model read it: a call of a later step than one that
             got that result (a step: the model passes of the trace that started before the call; calls asked for
             together, a fan-out, saw none of each other's results). A trace with no model pass recorded counts
             each call a step unless its calls of the tool ran at once. Not for a write tool (a booking confirmed
             six times is six bookings).
"""

from __future__ import annotations

from typing import Any

from llmtrace.analyzers.core.query import Query, attr
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.storage.views import PASS_OPERATIONS

REPEATS = 4  # calls of one tool in one trace sharing arguments, an error or a result before it looks like a loop
KINDS = ("args", "error", "result")


def rows(q: Query) -> list[dict[str, Any]]:
    """One row per (trace, tool) with REPEATS calls or more: calls, calls with arguments, failed calls, distinct
    arguments, the most calls alike, how many calls repeated an earlier one (``wasted``, each counted once) and by
    which way (``by_args``, ``by_error``, ``by_result``), and the result tokens of the repeats."""
    # read off the messages array (llmtrace.tool.observed=wire), a tool span carries no arguments or result: those
    # calls' repeats are the wire's loop.budget count (a span whose JSON never names the key is not parsed for it)
    repeat_a = f"(a_key IS NOT NULL AND a_n >= {REPEATS} AND a_i > 1)"
    repeat_e = f"(e_key IS NOT NULL AND e_n >= {REPEATS} AND e_i > 1)"
    repeat_r = (f"(r_key IS NOT NULL AND (has_passes OR NOT overlapped) AND r_n >= {REPEATS} AND r_after "
                f"AND r_seq >= {REPEATS - 1})")
    return q.rows(f"""
        WITH t AS MATERIALIZED (
            SELECT trace_id, start_ns, end_ns, {attr(N.GEN_AI_TOOL_NAME)} AS tool,
                   {attr(N.TOOL_ARGUMENTS_HASH)} AS args,
                   (status = 'error' OR {attr(N.TOOL_ERROR)} IS NOT NULL
                    OR coalesce({attr(N.TOOL_RESULT_KIND)}, '') = 'error') AS failed,
                   coalesce({attr(N.TOOL_RESULT_HASH)}, {attr(N.TOOL_ERROR)}, '') AS res,
                   coalesce({attr(N.TOOL_SCOPE)}, '') AS scope,
                   coalesce({attr(N.TOOL_RESULT_TOKENS)}, 0) AS result_tokens
            FROM {q.spans} WHERE operation = 'execute_tool'
              AND (NOT contains(attributes, '{N.TOOL_OBSERVED}')
                   OR coalesce({attr(N.TOOL_OBSERVED)}, '') <> 'wire')),
        named AS (SELECT trace_id, tool FROM t GROUP BY trace_id, tool HAVING count(*) >= {REPEATS}),
        -- the model passes of those traces: a call's step is how many had started before it (calls of one step
        -- were asked for together and saw none of each other's results)
        p AS (SELECT trace_id, start_ns FROM {q.spans} WHERE operation IN {PASS_OPERATIONS}
                AND trace_id IN (SELECT trace_id FROM named)),
        s AS (SELECT t.*, (SELECT count(*) FROM p WHERE p.trace_id = t.trace_id AND p.start_ns < t.start_ns) AS before,
                     EXISTS (SELECT 1 FROM p WHERE p.trace_id = t.trace_id) AS has_passes
              FROM t JOIN named USING (trace_id, tool)),
        g AS (SELECT s.*, s.args AS a_key, CASE WHEN s.failed THEN s.res END AS e_key,
                     CASE WHEN NOT s.failed AND s.res <> '' AND s.scope <> 'write' THEN s.res END AS r_key,
                     -- with no model pass recorded, each call is a step of its own unless two ran at once
                     -- (row_number's type cast to the count's: ClickHouse has no common type of UInt64 and Int64)
                     CASE WHEN s.has_passes THEN s.before
                          ELSE CAST(row_number() OVER (PARTITION BY s.trace_id, s.tool ORDER BY s.start_ns) AS BIGINT)
                     END AS step,
                     coalesce(s.start_ns < max(s.end_ns) OVER (PARTITION BY s.trace_id, s.tool ORDER BY s.start_ns
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false) AS at_once
              FROM s),
        w AS (SELECT g.*, bool_or(at_once) OVER (PARTITION BY trace_id, tool) AS overlapped,
                     count(*) OVER pa AS a_n, row_number() OVER (pa ORDER BY start_ns) AS a_i,
                     count(*) OVER pe AS e_n, row_number() OVER (pe ORDER BY start_ns) AS e_i,
                     count(*) OVER pr AS r_n, step > min(step) OVER pr AS r_after
              FROM g WINDOW pa AS (PARTITION BY trace_id, tool, a_key), pe AS (PARTITION BY trace_id, tool, e_key),
                            pr AS (PARTITION BY trace_id, tool, r_key)),
        -- (a sum, not count(*) FILTER ... OVER: the ClickHouse dialect's count cast does not take a window's filter)
        c AS (SELECT w.*, sum(CASE WHEN r_after THEN 1 ELSE 0 END) OVER (PARTITION BY trace_id, tool, r_key) AS r_seq
              FROM w),
        k AS (SELECT c.*, {repeat_a} AS by_a, {repeat_e} AS by_e, {repeat_r} AS by_r FROM c)
        SELECT trace_id, tool, count(*) AS calls, count(args) AS with_args, count(*) FILTER (WHERE failed) AS failed,
               count(DISTINCT args) AS distinct_args,
               greatest(max(CASE WHEN a_key IS NOT NULL THEN a_n ELSE 0 END),
                        max(CASE WHEN e_key IS NOT NULL THEN e_n ELSE 0 END),
                        max(CASE WHEN by_r THEN r_n ELSE 0 END)) AS most_alike,
               count(*) FILTER (WHERE by_a OR by_e OR by_r) AS wasted,
               count(*) FILTER (WHERE by_a) AS by_args, count(*) FILTER (WHERE by_e AND NOT by_a) AS by_error,
               count(*) FILTER (WHERE by_r AND NOT by_a) AS by_result,
               sum(CASE WHEN by_a OR by_e OR by_r THEN result_tokens ELSE 0 END) AS wasted_tokens
        FROM k GROUP BY trace_id, tool ORDER BY wasted DESC, calls DESC, trace_id, tool""")


def kind_of(r: dict[str, Any]) -> str:
    """Which way the row's calls repeated most: args, error or result."""
    counts = {"args": int(r["by_args"] or 0), "error": int(r["by_error"] or 0), "result": int(r["by_result"] or 0)}
    return max(KINDS, key=lambda k: counts[k])
