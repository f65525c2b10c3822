"""SGLang's request-trace slices put under the request they time, in the store writer's transaction.

SGLang traces a request as four levels (sglang srt/tracing/trace.py; docs/references/
production_request_trace.md): ``Bootstrap Room 0x..`` -> the request span `` Req <rid[:8]>`` (its
``gen_ai.latency.*`` numbers in seconds, mapped as the engine's pass) -> one span a thread that handled it
(``scheduler [TP 0] (host:.. | pid:..)``, with ``thread_label``) -> the slices (``prefill_waiting``,
``prefill_forward``, ...; otlp_engines.SPANS maps the two that are a stage). Every reader finds a pass's
stages among its children, but a slice is its grandchild, and the thread span that links the two usually
comes after its slices (it ends with its last one), in another export batch, from another process than
the request span. So the link is made where all of them meet, in the store: each batch that brings a
slice, a thread span or a request span of SGLang's, the staged slices whose thread span hangs under a pass
span are put under that pass span (the thread span keeps its other children), and the row that the
request's numbers implied for the same stage is dropped: the slice timed the stage itself (SGLang's
``time_in_model_prefill`` runs from dispatch to the first token, so it holds the queue wait as well).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from llmtrace.tracer.collect.otlp_engines import SGLANG_STAGED
from llmtrace.tracer.collect.otlp_join import MOVES_TABLE, JoinFailed, RowWindow
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.storage import pass_table
from llmtrace.tracer.storage.views import PASS_OPERATIONS

log = logging.getLogger("llmtrace.collect")
_SLICES = "(" + ", ".join(f"'{name}'" for name, _, _ in SGLANG_STAGED) + ")"
_STAGES = "(" + ", ".join(sorted({f"'{stage}'" for _, stage, _ in SGLANG_STAGED})) + ")"
_SLICE_NAMES = pa.array([name for name, _, _ in SGLANG_STAGED])
_BATCH = "_llmtrace_sglang_batch"
_TRACES = "_llmtrace_sglang_traces"
SLACK_NS = 120 * 1_000_000_000
OPEN_TTL_S = 900.0  # an unfinished request trace is looked for this long (the join's key window)
OPEN_CAP = 200_000  # past this many waiting traces the expired ones are dropped at once


_SLICE_STAGE = {name: stage for name, stage, _ in SGLANG_STAGED}
_SLICE_NAMES_SET = frozenset(_SLICE_STAGE)
_FROM_SGLANG = f'"{N.MAPPED_FROM}":"sglang"'


def link_in_body(rows: list[Any], passes: frozenset[str]) -> set[str]:  # rows: span_rows.SpanRow tuples
    """The same link on one request's rows before they are stored, where the request span, its thread span
    and the slices came in one OTLP request (rows replaced in place). Returns the traces whose slices or
    thread spans this request could not link (a part in another request): the store link runs for those. (A
    request span alone marks nothing: the parts that come after it mark its trace, and the store link that
    runs for them finds it stored.)"""
    names = [r[3] for r in rows]
    if _SLICE_NAMES_SET.isdisjoint(names) and " | pid:" not in "\n".join(map(str, names)):
        return set()  # no SGLang slice or thread span (one set test and one substring search a request)
    threads: dict[str, tuple[str, str]] = {}  # thread span id -> (trace, its parent)
    requests: set[str] = set()
    slices: list[int] = []
    for i, row in enumerate(rows):
        name = row[3]
        if row[5] in passes:
            if _FROM_SGLANG in str(row[14]):
                requests.add(str(row[1]))
        elif " | pid:" in str(name) and row[5] is None and row[6] is None:
            threads[str(row[1])] = (str(row[0]), str(row[2]))
        elif name in _SLICE_STAGE and row[6] == _SLICE_STAGE[str(name)]:
            slices.append(i)
    open_traces: set[str] = set()
    used: set[str] = set()
    linked: set[tuple[str, object]] = set()  # (request span, stage) a slice now times
    for i in slices:
        row = rows[i]
        thread = threads.get(str(row[2]))
        if thread is None or thread[1] not in requests:
            open_traces.add(str(row[0]))  # its thread span or its request span is in another request
            continue
        used.add(str(row[2]))
        linked.add((thread[1], row[6]))
        rows[i] = (*row[:2], thread[1], *row[3:])
    open_traces.update(trace for span, (trace, _) in threads.items() if span not in used)
    if linked:  # the rows the request's numbers implied for a stage a slice now times
        rows[:] = [r for r in rows if not (r[3] == r[6] and (r[2], r[6]) in linked and _FROM_SGLANG in str(r[14]))]
    return open_traces


def sglang_in(table: pa.Table) -> bool:
    """Whether a batch holds any SGLang span the link needs: a staged slice, a thread span, a request span."""
    names = table.column("name")
    return bool(pc.any(pc.is_in(names, _SLICE_NAMES)).as_py() or pc.any(pc.match_substring(names, " | pid:")).as_py()
                or pc.any(pc.match_substring(names, "Req ")).as_py())


def link_slices(conn: duckdb.DuckDBPyConnection, table: pa.Table, rows: RowWindow | None = None,
                moves: bool | None = None) -> None:
    """The writer's hook (after the join by response id, which may have moved these traces): link the
    staged slices of the batch's SGLang traces to their request span; drop the rows their numbers implied.
    ``rows``: the writer's row window (otlp_join.RowWindow), else every row is looked at. ``moves``: whether
    the join's moves table exists (None: look; a catalog query costs milliseconds a batch)."""
    if not table.num_rows or not sglang_in(table):
        return
    conn.register(_BATCH, table)
    try:
        lo, hi = conn.execute(f"SELECT min(start_ns), max(end_ns) FROM {_BATCH}").fetchall()[0]
        if moves is None:
            moves = _has(conn, MOVES_TABLE)
        moved = (f" UNION SELECT to_trace FROM {MOVES_TABLE} WHERE from_trace IN (SELECT trace_id FROM {_BATCH})"
                 if moves else "")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE {_TRACES} AS SELECT DISTINCT trace_id FROM {_BATCH}{moved}")
    finally:
        try:
            conn.unregister(_BATCH)
        except duckdb.Error:  # the transaction aborted: its error is the one to see
            pass
    window = rows or RowWindow()
    lo_ns, hi_ns = int(lo) - SLACK_NS, int(hi) + SLACK_NS

    def within(alias: str) -> str:
        return window.within(alias, lo_ns, hi_ns)

    mine = f"{within('spans')} AND spans.trace_id IN (SELECT trace_id FROM {_TRACES})"
    linked = conn.execute(f"""UPDATE spans SET parent_span_id = th.parent_span_id
        FROM spans th, spans req
        WHERE {mine} AND spans.name IN {_SLICES} AND spans.stage IN {_STAGES}
          AND th.trace_id = spans.trace_id AND th.span_id = spans.parent_span_id AND th.stage IS NULL
          AND th.operation IS NULL AND {within('th')}
          AND req.trace_id = th.trace_id AND req.span_id = th.parent_span_id AND req.operation IN {PASS_OPERATIONS}
          AND {within('req')}""").fetchall()
    dropped = conn.execute(f"""DELETE FROM spans WHERE {mine} AND spans.stage IN {_STAGES} AND spans.name = spans.stage
        AND json_extract_string(spans.attributes, '$."{N.MAPPED_FROM}"') = 'sglang'
        AND EXISTS (SELECT 1 FROM spans sl WHERE sl.trace_id = spans.trace_id AND {within('sl')}
                    AND sl.parent_span_id = spans.parent_span_id AND sl.stage = spans.stage
                    AND sl.name IN {_SLICES})""").fetchall()
    n_linked, n_dropped = (int(linked[0][0]) if linked else 0), (int(dropped[0][0]) if dropped else 0)
    if n_linked or n_dropped:  # the stamp counts spans; the traces' passes are built again at the next fold
        pass_table.rewritten(conn, f"SELECT trace_id, {lo_ns} FROM {_TRACES}", 0, n_dropped)
    conn.execute(f"DROP TABLE IF EXISTS {_TRACES}")


@dataclass(slots=True)
class SliceLinker:
    """``link_slices`` as the writer's hook: a failure turns it off (warned once) and the batch is retried
    without it, as the join's (a span matters more than its link)."""

    disabled: bool = False
    rows: RowWindow | None = None  # the join's row window (server.py shares it)
    _moves: bool = False  # the join's moves table exists (it is never dropped: looked for until it is)
    # traces whose SGLang spans a request could not link by itself (link_in_body), by when they are
    # forgotten: the store link runs for a batch holding one of them (every part of an unfinished request
    # trace comes in a request that marks it), and for every batch when None (a log's replay, tests)
    _open: dict[str, float] | None = None

    def expect(self, traces: set[str], ttl_s: float = OPEN_TTL_S) -> None:
        """Traces a request left unfinished (called before its rows are offered to the writer)."""
        if self._open is None:
            self._open = {}
        until = time.monotonic() + ttl_s
        for trace_id in traces:
            self._open[trace_id] = until

    def _needed(self, table: pa.Table) -> bool:
        if self._open is None:
            return sglang_in(table)
        now = time.monotonic()
        if len(self._open) > OPEN_CAP or (self._open and next(iter(self._open.values())) < now):
            self._open = {t: u for t, u in self._open.items() if u >= now}
        if not self._open:
            return False
        return bool(pc.any(pc.is_in(table.column("trace_id"), pa.array(list(self._open)))).as_py())

    def __call__(self, conn: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        if self.disabled or not table.num_rows or not self._needed(table):
            return
        try:
            if not self._moves:
                self._moves = _has(conn, MOVES_TABLE)
            link_slices(conn, table, self.rows, self._moves)
        except Exception as exc:  # noqa: BLE001 - any failure: the spans are written as they came
            self.disabled = True
            log.warning("llmtrace collect: linking SGLang's slices to their requests failed; off until restart: %s",
                        exc)
            raise JoinFailed(str(exc)) from exc


def _has(conn: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND NOT temporary",
                             [name]).fetchall()[0][0])
