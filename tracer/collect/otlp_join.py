"""Client and engine spans joined into one trace by response id, where no ``traceparent`` reached the engine.

An app's client span (our middleware, OpenLLMetry, OTel GenAI) and the engine's request span are one call,
but they land in two traces whenever the W3C context is lost on the way: Dynamo's KV router drops it, a
gateway that does not forward headers drops it, an engine started without ``--otlp-traces-endpoint``
context extraction never reads it. Both sides still name the call: the client records the response's id
(``gen_ai.response.id``), and the engine its request id, which is the same string:

- vLLM's OpenAI server answers with ``id = "chatcmpl-<base id>"`` and hands that same string to the engine
  as its request id; the ``llm_request`` span carries it as ``gen_ai.request.id`` (vllm/v1/engine/
  output_processor.py ``do_tracing``: the external request id, never the internal one with its suffix).
- SGLang's OpenAI server answers with ``id = meta_info["id"]``, the request's ``rid``; its request span
  (``Req <rid[:8]>``, sglang/srt/tracing/trace.py ``trace_req_start``) carries ``rid``, prefixed with
  ``<worker>_`` under several tokenizer workers (the part after the last ``_`` is the id).
- Dynamo's worker spans carry the frontend's ``request_id`` / ``x_request_id`` (its logging fields; the
  names are read as written there, not checked against a running Dynamo).

Keys are compared without an OpenAI prefix (``chatcmpl-``, ``cmpl-``) on either side.

**Where the join lives: at ingest, in the store writer's transaction (this module), not in a view.**
Every reader already reads "one call is one trace" off the ``spans`` table: the ``passes`` view pairs a
server pass with the client pass that is its parent, the writer's kept pass table (storage/pass_table.py)
folds whole traces, the explorer's and the report's waterfalls walk one trace's span tree, the analyzers
take evidence by trace id, ``export --parquet`` and the ClickHouse views copy the rows. A view would have
to be threaded through each of them (and transpiled for ClickHouse); rewriting the engine's rows once
makes all of them right with no change, at the cost of an UPDATE of a few rows per joined call. Nothing is
lost by it: the engine pass keeps its own trace id and parent in ``llmtrace.join.trace_id`` /
``llmtrace.join.parent_span_id`` (so the id in the engine's logs still finds it), and ``llmtrace.join.by``
says the pair was joined by response id, which the waterfalls show.

How: each batch the writer commits, the pass spans it brings that name an id are written down in
``llmtrace_join_keys`` (client: the response id; server: the request id), and a server key meeting a
client key of another trace moves the engine's whole trace under that client pass: trace id rewritten,
the engine's root spans and its pass span made children of the client pass, the marks above set on the
pass span. Arrival order does not matter (whichever side comes second makes the match, in the batch that
brings it, whichever collector process wrote the first); the move is recorded in ``llmtrace_join_moves``
so engine spans that arrive later (a child span exported after its request, a replayed write-ahead log)
follow it, and a replayed copy of a span already moved is dropped. Keys and moves are forgotten after
``window_s`` of wall clock (both sides of one call are exported seconds apart).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.storage import pass_table
from llmtrace.tracer.storage.views import PASS_OPERATION_NAMES, PASS_OPERATIONS

log = logging.getLogger("llmtrace.collect")
KEYS_TABLE = "llmtrace_join_keys"
MOVES_TABLE = "llmtrace_join_moves"
BY_RESPONSE_ID = "response_id"
WINDOW_S = 900.0  # keys and moves older than this (wall clock) are forgotten
SLACK_NS = 120 * 1_000_000_000  # an engine trace's spans start within this of its pass span (a zone-map range)

# The engine's spellings of its request id, first present wins (read off the stored attributes JSON)
SERVER_KEYS = ("gen_ai.request.id", "rid", "request_id", "x_request_id", N.GEN_AI_RESPONSE_ID)
_PREFIX = "^(chatcmpl-|cmpl-)"
_BATCH = "_llmtrace_join_batch"
_NOW = "_llmtrace_join_now"
_MOVE = "_llmtrace_join_move"
_PAIRS = "_llmtrace_join_pairs"
_BODY = "_llmtrace_join_body"
# a pass span's attributes that spell a key of either side (the JSON's quoted key) and no done mark
_NAMES_A_CALL = '"(' + "|".join(k.replace(".", "\\.") for k in dict.fromkeys((N.GEN_AI_RESPONSE_ID, *SERVER_KEYS))) + ')":'

_EARLIER = "_llmtrace_join_earlier"

_TABLES_SQL = (
    f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} (key VARCHAR, side VARCHAR, trace_id VARCHAR, span_id VARCHAR, "
    "parent_span_id VARCHAR, start_ns BIGINT, end_ns BIGINT, seq BIGINT, at_s DOUBLE)",
    f"CREATE TABLE IF NOT EXISTS {MOVES_TABLE} (from_trace VARCHAR, to_trace VARCHAR, to_span VARCHAR, "
    "start_ns BIGINT, end_ns BIGINT, at_s DOUBLE)",
)


def _paths() -> str:
    keys = (N.SIDE, N.GEN_AI_RESPONSE_ID, *SERVER_KEYS)
    return "[" + ", ".join(f"'$.\"{k}\"'" for k in keys) + "]"


# One JSON parse a pass span: its side, the client's response id, the engine's request id spellings
_KEYS_SELECT = f"""
    SELECT regexp_replace(raw, '{_PREFIX}', '') AS key, side, trace_id, span_id, parent_span_id, start_ns, end_ns
    FROM (SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, v[1] AS side,
                 CASE WHEN v[1] = 'client' THEN v[2]
                      ELSE coalesce(v[3], string_split(v[4], '_')[-1], {", ".join(f"v[{i}]" for i in
                                                                                   range(5, 4 + len(SERVER_KEYS)))})
                 END AS raw
          FROM (SELECT *, json_extract_string(attributes, {_paths()}) AS v FROM {_BATCH}
                WHERE operation IN {PASS_OPERATIONS} AND (contains(attributes, '.id"') OR contains(attributes, '"rid"')
                      OR contains(attributes, 'request_id"')) AND NOT contains(attributes, '"{N.JOIN_KEY}"')))
    WHERE side IN ('client', 'server') AND raw IS NOT NULL AND raw <> ''
"""


@dataclass(slots=True)
class RowWindow:
    """A lower bound on the row id of every span the store took in the last ``window_s`` seconds: the rows a
    join or a link rewrites arrived within seconds of each other, and DuckDB skips the row groups below a
    ``rowid >=`` bound (span times do not narrow much at tens of thousands of spans a second). The bound is
    the span count before the oldest batch of the window (row ids only grow; a count is never above them),
    0 until this process has watched a whole window, and 0 again for a window after rows were deleted
    (retention), which may let DuckDB compact row ids. Advanced once a batch, in its transaction."""

    window_s: float = 120.0
    lo: int = 0
    before: int = 0  # the spans stored before the batch being written (its rows' ids start here)
    _marks: deque[tuple[float, int]] = field(default_factory=deque)
    _since: float | None = None
    _last: int | None = None

    def advance(self, conn: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        now = time.monotonic()
        count = int(conn.execute("SELECT count(*) FROM spans").fetchall()[0][0])
        before = self.before = max(count - table.num_rows, 0)
        if self._since is None or (self._last is not None and before < self._last):
            self._since, self._marks = now, deque()  # a fresh process, or rows deleted: no bound for a window
        self._last = count
        self._marks.append((now, before))
        while self._marks and self._marks[0][0] < now - self.window_s:
            self._marks.popleft()
        self.lo = self._marks[0][1] if now - self._since >= self.window_s and self._marks else 0

    def within(self, alias: str, lo_ns: int, hi_ns: int) -> str:
        """The rows of the window whose span starts between ``lo_ns`` and ``hi_ns`` (zone maps, both)."""
        return f"{alias}.rowid >= {self.lo} AND {alias}.start_ns BETWEEN {lo_ns} AND {hi_ns}"


class JoinFailed(RuntimeError):
    """The join's statements failed inside a batch's transaction: the writer retries the batch (without it)."""


@dataclass(slots=True)
class ResponseIdJoin:
    """The writer's hook (``SpanWriter(on_insert=...)``, and the write-ahead log's replay): called inside
    the transaction that inserted ``table``, after the insert."""

    window_s: float = WINDOW_S
    joined: int = 0  # engine traces moved under a client call, by this process
    disabled: bool = False
    rows: RowWindow = field(default_factory=RowWindow)  # advanced by the caller once a batch (server.py)
    _seq: int = 0
    _ready: bool = False
    _next_prune: float = 0.0

    def __call__(self, conn: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        """Join what ``table`` completes. A failure here must not cost a span: the join turns itself off
        (warned once) and the batch is retried without it (a RuntimeError is the writer's 'retry' kind)."""
        self._run(conn, table, dedupe=False)

    def replayed(self, conn: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        """The same for a write-ahead log's replay, which may bring again spans that were moved already
        (it skips spans by trace and span id, and the trace id moved): those copies are dropped."""
        self._run(conn, table, dedupe=True)

    def _run(self, conn: duckdb.DuckDBPyConnection, table: pa.Table, dedupe: bool) -> None:
        if self.disabled or not table.num_rows:
            return
        try:
            self._join(conn, table, dedupe)
        except Exception as exc:  # noqa: BLE001 - any failure: the spans matter more than the join
            self.disabled = True
            log.warning("llmtrace collect: joining client and engine spans by response id failed; the join is "
                        "off until restart, spans are written as they came: %s", exc)
            raise JoinFailed(str(exc)) from exc

    def _join(self, conn: duckdb.DuckDBPyConnection, table: pa.Table, dedupe: bool) -> None:
        if not self._ready:
            for stmt in _TABLES_SQL:
                conn.execute(stmt)
            self._ready = True
        self._seq += 1
        pass_rows = table.filter(pc.is_in(table.column("operation"), pa.array(PASS_OPERATION_NAMES)))
        conn.register(_BATCH, table)
        try:
            new, earlier = 0, False
            if pass_rows.num_rows:
                attrs = pass_rows.column("attributes")
                # a pass span that names its call and still waits for its other side (one vectorised test:
                # the SQL's JSON parse only when there is one)
                if pc.any(pc.match_substring_regex(attrs, _NAMES_A_CALL)).as_py():
                    added = conn.execute(f"INSERT INTO {KEYS_TABLE} SELECT *, {self._seq}, {time.time()} "
                                         f"FROM ({_KEYS_SELECT})").fetchall()
                    if added and added[0][0]:  # no key waiting from this batch: no pair it could complete
                        new = self._matches(conn)
                if pc.any(pc.match_substring(attrs, f'"{N.JOIN_BY}"')).as_py():  # joined in their requests
                    earlier = self._body_moves(conn)
            self._move(conn, new, dedupe, earlier)
        finally:
            try:
                conn.unregister(_BATCH)
            except duckdb.Error:  # the transaction aborted: its error is the one to see
                pass
        now = time.monotonic()
        if now >= self._next_prune:
            cut = time.time() - self.window_s
            conn.execute(f"DELETE FROM {KEYS_TABLE} WHERE at_s < {cut}")
            conn.execute(f"DELETE FROM {MOVES_TABLE} WHERE at_s < {cut}")
            self._next_prune = now + min(60.0, self.window_s / 4)

    def _matches(self, conn: duckdb.DuckDBPyConnection) -> int:
        """This batch's keys meeting the other side's (in this batch or an earlier one): the moves to make,
        one an engine trace (to the latest-starting client pass naming its id: the innermost, nearest the
        wire, where two instrumentations recorded one call). Written to the moves table; returns how many."""
        seq = self._seq
        # every meeting of this batch's keys, in one trace too (a traceparent already joined those: their keys
        # are done with, and go, so the table holds only calls still waiting for their other side)
        conn.execute(f"""CREATE OR REPLACE TEMP TABLE {_PAIRS} AS
            SELECT s.key, s.trace_id AS from_trace, s.span_id AS engine_span, s.parent_span_id AS engine_parent,
                   s.start_ns, s.end_ns, c.trace_id AS to_trace, c.span_id AS to_span, c.start_ns AS c_start
            FROM {KEYS_TABLE} s JOIN {KEYS_TABLE} c ON c.key = s.key
            WHERE s.side = 'server' AND c.side = 'client' AND (s.seq = {seq} OR c.seq = {seq})""")
        conn.execute(f"""CREATE OR REPLACE TEMP TABLE {_NOW} AS
            SELECT from_trace, arg_max(to_trace, c_start) AS to_trace, arg_max(to_span, c_start) AS to_span,
                   arg_min(engine_span, start_ns) AS engine_span, arg_min(engine_parent, start_ns) AS engine_parent,
                   arg_min(key, start_ns) AS key, min(start_ns) AS start_ns, max(end_ns) AS end_ns
            FROM {_PAIRS} WHERE to_trace <> from_trace GROUP BY from_trace""")
        n = int(conn.execute(f"SELECT count(*) FROM {_NOW}").fetchall()[0][0])
        if n:
            # a chain (an engine trace that a gateway's trace was moved into) ends at the client's trace
            conn.execute(f"UPDATE {MOVES_TABLE} SET to_trace = m.to_trace, to_span = m.to_span FROM {_NOW} m "
                         f"WHERE {MOVES_TABLE}.to_trace = m.from_trace")
            conn.execute(f"INSERT INTO {MOVES_TABLE} SELECT from_trace, to_trace, to_span, start_ns, end_ns, "
                         f"{time.time()} FROM {_NOW}")
            self.joined += n
        conn.execute(f"DELETE FROM {KEYS_TABLE} WHERE key IN (SELECT key FROM {_PAIRS})")  # both sides: used
        conn.execute(f"DROP TABLE IF EXISTS {_PAIRS}")
        return n

    def _body_moves(self, conn: duckdb.DuckDBPyConnection) -> bool:
        """Record the pairs this batch's requests joined themselves (otlp_join_body.py): their moves, for the
        engine's spans that come later; True when spans of their engine traces were stored before this batch
        (they are moved by ``_move``, as ``_EARLIER``)."""
        conn.execute(f"""CREATE OR REPLACE TEMP TABLE {_BODY} AS
            SELECT json_extract_string(attributes, '$."{N.JOIN_TRACE_ID}"') AS from_trace, trace_id AS to_trace,
                   parent_span_id AS to_span, start_ns, end_ns
            FROM {_BATCH} WHERE operation IN {PASS_OPERATIONS} AND contains(attributes, '"{N.JOIN_BY}"')""")
        n, lo, hi = conn.execute(f"SELECT count(*), min(start_ns), max(end_ns) FROM {_BODY}").fetchall()[0]
        if not n:
            return False
        conn.execute(f"INSERT INTO {MOVES_TABLE} SELECT from_trace, to_trace, to_span, start_ns, end_ns, "
                     f"{time.time()} FROM {_BODY}")
        self.joined += int(n)
        # spans of those engine traces stored by an earlier batch: one read of the recent rows, no rewrite
        # when there are none (an engine's children usually come in its request span's export)
        lo, hi = int(lo) - SLACK_NS, int(hi) + SLACK_NS
        conn.execute(f"""CREATE OR REPLACE TEMP TABLE {_EARLIER} AS
            SELECT b.from_trace, b.to_trace, b.to_span, NULL AS engine_span, NULL AS engine_parent, NULL AS key,
                   b.start_ns, b.end_ns
            FROM {_BODY} b WHERE b.from_trace IN (SELECT DISTINCT trace_id FROM spans WHERE
                {self.rows.within('spans', lo, hi)} AND spans.rowid < {self.rows.before}
                AND spans.trace_id IN (SELECT from_trace FROM {_BODY}))""")
        return bool(conn.execute(f"SELECT count(*) FROM {_EARLIER}").fetchall()[0][0])

    def _move(self, conn: duckdb.DuckDBPyConnection, new: int, dedupe: bool, earlier: bool = False) -> None:
        """Rewrite the rows of every engine trace this batch joined or brought spans for (a late child of an
        engine trace moved earlier): under the client's trace, roots and the pass under the client pass."""
        late = f"""SELECT m.from_trace, m.to_trace, m.to_span, NULL AS engine_span, NULL AS engine_parent,
                          NULL AS key, m.start_ns, m.end_ns
                   FROM {MOVES_TABLE} m WHERE m.from_trace IN (SELECT DISTINCT trace_id FROM {_BATCH})"""
        parts = [f"SELECT * FROM {_NOW}"] if new else []
        if earlier:
            parts.append(f"SELECT * FROM {_EARLIER}")
        if not parts and not conn.execute(f"SELECT EXISTS (SELECT 1 FROM {MOVES_TABLE} WHERE from_trace IN "
                                          f"(SELECT trace_id FROM {_BATCH}))").fetchall()[0][0]:
            return  # nothing joined now, no late span of a trace moved before: one probe, no temporary table
        source = "(" + " UNION ALL BY NAME ".join([*parts, late]) + ")"
        conn.execute(f"""CREATE OR REPLACE TEMP TABLE {_MOVE} AS
            SELECT from_trace, any_value(to_trace) AS to_trace, any_value(to_span) AS to_span,
                   max(engine_span) AS engine_span, max(engine_parent) AS engine_parent, max(key) AS key,
                   min(start_ns) AS start_ns, max(end_ns) AS end_ns
            FROM {source} GROUP BY from_trace""")
        n, lo, hi = conn.execute(f"SELECT count(*), min(start_ns), max(end_ns) FROM {_MOVE}").fetchall()[0]
        if not n:
            return
        lo, hi = int(lo) - SLACK_NS, int(hi) + SLACK_NS
        rows = f"{self.rows.within('spans', lo, hi)} AND spans.trace_id IN (SELECT from_trace FROM {_MOVE})"
        dup = (f"spans.span_id IN (SELECT t.span_id FROM spans t WHERE {self.rows.within('t', lo, hi)} AND t.trace_id IN "
               f"(SELECT to_trace FROM {_MOVE}))") if dedupe else "false"
        parent = ("CASE WHEN spans.parent_span_id IS NULL OR spans.span_id = m.engine_span THEN m.to_span "
                  "ELSE spans.parent_span_id END")
        attrs = (f"CASE WHEN spans.span_id = m.engine_span THEN json_merge_patch(spans.attributes, json_object("
                 f"'{N.JOIN_BY}', '{BY_RESPONSE_ID}', '{N.JOIN_KEY}', m.key, '{N.JOIN_TRACE_ID}', m.from_trace, "
                 f"'{N.JOIN_PARENT_SPAN_ID}', m.engine_parent)) ELSE spans.attributes END")
        # what the rewrite moves the kept pass table's stamp by (its sum of a hash of every pass span's columns,
        # storage/pass_table.py): one pass over the pass rows it rewrites, before it, instead of two whole sums
        delta = conn.execute(f"""SELECT coalesce(sum(CASE WHEN dup THEN -h_old ELSE h_new - h_old END), 0) FROM (
            SELECT {_hash('spans.trace_id', 'spans.parent_span_id', 'spans.attributes')} AS h_old,
                   {_hash('m.to_trace', parent, attrs)} AS h_new, {dup} AS dup
            FROM spans JOIN {_MOVE} m ON spans.trace_id = m.from_trace
            WHERE {rows} AND spans.operation IN {PASS_OPERATIONS})""").fetchall()[0][0]
        # a replayed copy of a span already moved (the log replays by trace and span id, which moved): dropped
        dropped = conn.execute(f"DELETE FROM spans WHERE {rows} AND {dup}").fetchall() if dedupe else []
        # the marks first, on the pass rows alone (rewriting the JSON of every moved row cost most of the update)
        conn.execute(f"""UPDATE spans SET attributes = {attrs} FROM {_MOVE} m
            WHERE {rows} AND spans.trace_id = m.from_trace AND spans.span_id = m.engine_span""")
        conn.execute(f"""UPDATE spans SET trace_id = m.to_trace, parent_span_id = {parent}
            FROM {_MOVE} m WHERE {rows} AND spans.trace_id = m.from_trace""")
        pass_table.rewritten(conn, f"SELECT from_trace, {lo} FROM {_MOVE} UNION SELECT to_trace, {lo} FROM {_MOVE}",
                             int(delta), int(dropped[0][0]) if dropped else 0)
        conn.execute(f"DROP TABLE IF EXISTS {_MOVE}")



def _hash(trace: str, parent: str, attributes: str) -> str:
    """storage/pass_table.py's hash of a pass span's columns, with these three as the row will hold them."""
    return (f"CAST(hash({trace}, spans.span_id, {parent}, spans.service, spans.deploy, spans.start_ns, spans.end_ns, "
            f"spans.status, spans.operation, CAST({attributes} AS VARCHAR)) AS HUGEINT)")
