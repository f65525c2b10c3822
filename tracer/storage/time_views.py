"""Where the time of a pass went: the ``time_breakdown`` and ``ttft_breakdown`` views.

A stage span's duration is not its time: inside the engine attention, the feed-forward and sampling run
interleaved in every step, so their spans are envelopes around the whole pass. Each stage span carries its
own exclusive time instead (``llmtrace.stage.self_ms``, tracer/registry/stages.py COMMON_VALUES), and these views
add those up, one row per pass and stage, so the parts of a pass sum to its wall clock.

- **Server passes** (the bundled engine or any backend that records self time): every stage's self time;
  a stage without one (the server's own sequential steps: connection, routing, admission, intake) counts
  its span's duration. What no stage claims is one row, ``other``, so nothing is hidden or guessed.
- **Client passes** see only the wire: the connection, the wait for the first byte (the provider's share,
  named ``unobserved``: the provider's queue, prefill and network are not seen from here), first byte to
  first content token, and the stream to its last chunk; what follows the last chunk is ``other``.

``ttft_breakdown`` splits a server pass's time to first token the same way: queue, routing, intake, cache
lookup, prefill, first token (head and sampling of the first token), batching (waiting between prefill
chunks), and ``delivery`` (engine to HTTP), plus ``detokenizer_holdback``: how much later than the first
token the first text left the engine (beyond the TTFT, up to the first content token).
"""

from __future__ import annotations

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as sid
from llmtrace.tracer.registry.stages import IDLE, SELF_MS, STAGES, TTFT_MS
from llmtrace.tracer.storage.views import PASS_OPERATIONS

# The latest end among the stage spans of the same pass that started before this one: a stage of the
# server's own (no self time: connection, routing, intake, the response) counts from there, so the server's
# glue between two of its steps (parsing the body, scheduling the next coroutine) is the next step's time,
# not nobody's. An engine envelope that is still running when a stage starts leaves that stage its span.
_PREV_END = ("max(end_ns) OVER (PARTITION BY {trace}, {parent} ORDER BY start_ns, end_ns "
             "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns")
_OWN_SPAN = ("({end} - least(k.start_ns, greatest(coalesce(k.prev_end_ns, p.pass_start_ns), p.pass_start_ns)))"
             " / 1e6")


def _num(name: str) -> str:
    return f"TRY_CAST(json_extract_string(attributes, '$.\"{name}\"') AS DOUBLE)"


def time_breakdown_select(source: str = "spans") -> str:
    """One row per pass and stage: trace_id, pass_span_id, side, phase, stage, exclusive_ms, share."""
    return f"""
        WITH p AS (SELECT trace_id, span_id, start_ns AS pass_start_ns, duration_ms AS wall_ms,
                          json_extract_string(attributes, '$."{N.SIDE}"') AS side,
                          {_num(N.TTFT_MS)} AS ttft_ms
                   FROM {source} WHERE operation IN {PASS_OPERATIONS}),
             kids AS (SELECT s.trace_id, s.parent_span_id AS pass_span_id, s.phase, s.stage, s.duration_ms,
                             {_num(SELF_MS)} AS self_ms,
                             coalesce(TRY_CAST(json_extract_string(s.attributes, '$."{IDLE}"') AS BOOLEAN), false)
                                 AS idle,
                             {_num(N.CONNECTION_CONNECT_MS).replace("attributes", "s.attributes")}
                                 AS connect_ms,
                             {_num(N.STREAM_FIRST_BYTE_MS).replace("attributes", "s.attributes")}
                                 AS first_byte_ms,
                             {_num(N.STREAM_FIRST_CONTENT_MS).replace("attributes", "s.attributes")}
                                 AS first_content_ms,
                             s.start_ns, s.end_ns, {_PREV_END.format(trace="s.trace_id", parent="s.parent_span_id")}
                      FROM {source} s WHERE s.stage IS NOT NULL AND s.parent_span_id IS NOT NULL),
             server_parts AS (
                 SELECT p.trace_id, p.span_id AS pass_span_id, p.side, k.phase, k.stage,
                        sum(CASE WHEN k.idle THEN 0.0 WHEN k.self_ms IS NOT NULL THEN k.self_ms
                                 ELSE {_OWN_SPAN.format(end="k.end_ns")} END) AS exclusive_ms
                 FROM p JOIN kids k ON k.trace_id = p.trace_id AND k.pass_span_id = p.span_id
                 WHERE p.side IS DISTINCT FROM 'client'
                 GROUP BY ALL),
             client_marks AS (
                 SELECT p.trace_id, p.span_id AS pass_span_id, p.wall_ms, p.ttft_ms,
                        coalesce(max(k.connect_ms) FILTER (WHERE k.stage = '{sid.ARRIVAL_CONNECTION}'), 0.0) AS connect_ms,
                        max(k.first_byte_ms) AS first_byte_ms, max(k.first_content_ms) AS first_content_ms
                 FROM p LEFT JOIN kids k ON k.trace_id = p.trace_id AND k.pass_span_id = p.span_id
                 WHERE p.side = 'client' GROUP BY ALL),
             client_points AS (
                 SELECT *, least(greatest(connect_ms, 0.0), wall_ms) AS t_connect,
                        least(greatest(coalesce(first_byte_ms, first_content_ms, ttft_ms, wall_ms), connect_ms),
                              wall_ms) AS t_byte,
                        least(greatest(coalesce(first_content_ms, ttft_ms, first_byte_ms, wall_ms),
                                       coalesce(first_byte_ms, connect_ms)), wall_ms) AS t_content
                 FROM client_marks),
             client_parts AS (
                 SELECT trace_id, pass_span_id, 'client' AS side, 'arrival' AS phase, '{sid.ARRIVAL_CONNECTION}' AS stage,
                        t_connect AS exclusive_ms FROM client_points
                 UNION ALL SELECT trace_id, pass_span_id, 'client', NULL, 'unobserved', t_byte - t_connect
                 FROM client_points
                 UNION ALL SELECT trace_id, pass_span_id, 'client', 'arrival', '{sid.ARRIVAL_STREAM_SETUP}',
                        t_content - t_byte FROM client_points
                 UNION ALL SELECT trace_id, pass_span_id, 'client', 'generation', '{sid.GEN_STREAMING}',
                        wall_ms - t_content FROM client_points),
             parts AS (SELECT * FROM server_parts UNION ALL SELECT * FROM client_parts),
             other AS (SELECT p.trace_id, p.span_id AS pass_span_id, coalesce(p.side, 'server') AS side,
                              NULL AS phase, 'other' AS stage,
                              greatest(any_value(p.wall_ms) - coalesce(sum(x.exclusive_ms), 0.0), 0.0) AS exclusive_ms
                       FROM p LEFT JOIN parts x ON x.pass_span_id = p.span_id
                       GROUP BY p.trace_id, p.span_id, p.side)
        SELECT a.trace_id, a.pass_span_id, a.side, a.phase, a.stage, a.exclusive_ms,
               CASE WHEN p.wall_ms > 0 THEN a.exclusive_ms / p.wall_ms END AS share
        FROM (SELECT * FROM parts UNION ALL SELECT * FROM other) a JOIN p ON p.span_id = a.pass_span_id"""


# ttft component -> the stages whose before-first-token time it holds (service stages by their duration): each
# stage's ``ttft_part`` in the registry (tracer/registry/catalog), never a list here: a hand-typed list once held
# "intake.evidence_format" (the stage is intake.evidence_formatting) and that stage was never counted.
# (queue and batching are apart below: the batching stage's queue wait is the queue's.)
_SPLIT_APART = ("queue", "batching", "first_token")
TTFT_PARTS: dict[str, tuple[str, ...]] = {}
for _stage in STAGES:
    if _stage.ttft_part:
        TTFT_PARTS.setdefault(_stage.ttft_part, ())
        TTFT_PARTS[_stage.ttft_part] += (_stage.id,)
TTFT_COMPONENTS: dict[str, tuple[str, ...]] = {k: v for k, v in TTFT_PARTS.items() if k not in _SPLIT_APART}


def ttft_breakdown_select(source: str = "spans") -> str:
    """One row per server pass and TTFT component: trace_id, pass_span_id, component, ms, share."""
    arms = " ".join(f"WHEN stage IN ({', '.join(repr(s) for s in stages)}) THEN '{name}'"
                    for name, stages in TTFT_PARTS.items())
    return f"""
        WITH p AS (SELECT trace_id, span_id, start_ns AS pass_start_ns, {_num(N.TTFT_MS)} AS ttft_ms,
                          {_num(N.ENGINE_TTFT_MS)} AS engine_ttft_ms
                   FROM {source} WHERE operation IN {PASS_OPERATIONS}
                     AND json_extract_string(attributes, '$."{N.SIDE}"') = 'server'),
             kids AS (SELECT trace_id AS kid_trace_id, parent_span_id, stage, start_ns, end_ns, duration_ms,
                             {_PREV_END.format(trace="trace_id", parent="parent_span_id")},
                             {_num(SELF_MS)} AS self_ms,
                             {_num(TTFT_MS)} AS ttft_part, {_num(N.BATCH_QUEUE_MS)} AS queue_ms,
                             {_num(N.DETOK_FIRST_TEXT_DELAY_MS)} AS holdback_ms
                      FROM {source} WHERE stage IS NOT NULL),
             before AS (
                 SELECT p.trace_id, p.span_id AS pass_span_id, p.ttft_ms, p.engine_ttft_ms, k.*,
                        CASE WHEN k.ttft_part IS NOT NULL THEN k.ttft_part  -- the engine's own split
                             -- a span of its own (the server's sequential steps): the part of it before the
                             -- first token, never more (a span without a split that runs past it is cut there)
                             ELSE greatest({_OWN_SPAN.format(end="least(CAST(k.end_ns AS DOUBLE), p.pass_start_ns + p.ttft_ms * 1e6)")}, 0.0)
                             END AS ms
                 FROM p JOIN kids k ON k.kid_trace_id = p.trace_id AND k.parent_span_id = p.span_id
                 WHERE p.ttft_ms IS NOT NULL),
             parts AS (
                 SELECT trace_id, pass_span_id, ttft_ms,
                        CASE {arms}
                             ELSE 'other' END AS component,
                        CASE WHEN stage = '{sid.FORWARD_BATCHING}' THEN ms - coalesce(queue_ms, 0.0) ELSE ms END AS ms
                 FROM before
                 UNION ALL SELECT trace_id, pass_span_id, ttft_ms, 'queue', queue_ms FROM before
                 WHERE stage = '{sid.FORWARD_BATCHING}' AND queue_ms IS NOT NULL),
             summed AS (SELECT trace_id, pass_span_id, ttft_ms, component, sum(ms) AS ms FROM parts GROUP BY ALL),
             engine AS (SELECT DISTINCT pass_span_id, engine_ttft_ms FROM before),
             -- delivery is measured where the engine says when its first-token step ended (the HTTP side
             -- saw the token later by this much); what no part claims is 'other', never folded into a part
             delivery AS (SELECT s.trace_id, s.pass_span_id, s.ttft_ms, 'delivery' AS component,
                                 greatest(coalesce(s.ttft_ms - any_value(e.engine_ttft_ms), 0.0), 0.0) AS ms
                          FROM summed s LEFT JOIN engine e ON e.pass_span_id = s.pass_span_id
                          GROUP BY s.trace_id, s.pass_span_id, s.ttft_ms),
             unclaimed AS (SELECT s.trace_id, s.pass_span_id, s.ttft_ms, 'other' AS component,
                                  greatest(s.ttft_ms - sum(s.ms) - any_value(d.ms), 0.0) AS ms
                           FROM summed s JOIN delivery d ON d.pass_span_id = s.pass_span_id
                           WHERE s.component != 'other'
                           GROUP BY s.trace_id, s.pass_span_id, s.ttft_ms),
             holdback AS (SELECT trace_id, pass_span_id, ttft_ms, 'detokenizer_holdback' AS component,
                                 holdback_ms AS ms FROM before WHERE holdback_ms IS NOT NULL)
        SELECT trace_id, pass_span_id, component, ms,
               CASE WHEN ttft_ms > 0 THEN ms / ttft_ms END AS share
        FROM (SELECT * FROM summed WHERE component != 'other' UNION ALL SELECT * FROM delivery
              UNION ALL SELECT * FROM unclaimed UNION ALL SELECT * FROM holdback)"""


def time_views_sql(source: str = "spans") -> list[str]:
    return [
        f"CREATE OR REPLACE VIEW time_breakdown AS {time_breakdown_select(source)}",
        f"CREATE OR REPLACE VIEW ttft_breakdown AS {ttft_breakdown_select(source)}",
    ]


# ── what a client pass did not time (the explorer's waterfall and time bar, the report's trace pages) ─────────
# A client pass's spans of these stages run from the request to the first response byte: they enclose the
# provider's hidden work (queue, prefill, a buffered answer's whole generation) and the network, so their length
# is a wait the client saw, not the stage's own time. Readers draw them as not observed, never as a solid bar.
CLIENT_WAIT_STAGES: frozenset[str] = frozenset({sid.ARRIVAL_STREAM_SETUP, sid.CACHE_PREFIX_MATCH})
WHOLE_CALL = "whole_call"  # a time-bar part: the call as one piece, where it could not be split
WHOLE_CALL_TITLE = "the whole call (not split)"


def stage_time_observed(stage: str | None, pass_side: str | None, self_ms: float | None = None) -> bool:
    """Whether a stage span's length is the stage's own measured time: not for CLIENT_WAIT_STAGES under a client
    pass (unless the span records its own time)."""
    return not (pass_side == "client" and stage in CLIENT_WAIT_STAGES and self_ms is None)


def pass_is_split(pass_side: str | None, ttft_ms: object) -> bool:
    """Whether a pass's time can be split into parts: a client pass that saw no first token (a buffered answer, a
    failed call) observed only the whole call, from the request to the last byte."""
    return pass_side != "client" or ttft_ms is not None
