"""ClickHouse as a store: the table the OpenTelemetry Collector's ClickHouse exporter writes, read as ours.

A team that runs the stock Collector (otlp receiver -> batch -> ``clickhouse`` exporter) has every span in
``otel_traces`` (the exporter's layout: ``OTEL_TRACES_DDL``). This module lays a ``spans`` view over that
table in the shape of our store (tracer/storage/views.py SPAN_COLUMNS: attributes as JSON text built from the
``SpanAttributes`` map, stage/phase/operation from their attributes, deploy from ``service.version``),
then the documented views (``requests``, ``passes``, ...) transpiled from schema.py's DuckDB definitions
by tracer/storage/dialect.py, and hands the analyzers a connection with DuckDB's surface (``execute``,
``fetchall``, ``fetchone``, ``description``) whose statements are transpiled and run inside ClickHouse.

Two ways to reach ClickHouse, one SQL: ``chdb://PATH`` (ClickHouse's engine in-process, used by the tests)
and ``clickhouse://HOST:8123/DB`` (a server over HTTP with clickhouse-connect).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry.semconv import LLMTRACE_PHASE, LLMTRACE_STAGE
from llmtrace.tracer.storage.dialect import TranspileError, to_clickhouse
from llmtrace.tracer.storage.fetch import scalar
from llmtrace.tracer.storage.store import SpanFilter, StoreError
from llmtrace.tracer.storage.views import requests_select, views_sql


class ClickHouseError(StoreError):
    """ClickHouse refused a statement or cannot be reached (message for people, statement attached)."""


# The exporter's table (opentelemetry-collector-contrib exporter/clickhouseexporter traces_table.sql),
# with its codecs and indexes; TTL is the exporter's `ttl` setting (docs/scale.md).
OTEL_TRACES_DDL = """CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (Timestamp DateTime64(9), Name LowCardinality(String),
                   Attributes Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    Links Nested (TraceId String, SpanId String, TraceState String,
                  Attributes Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"""

# The spans in our shape, written once per span as the Collector inserts (a materialized view on otel_traces):
# building the attributes' JSON from the map on every query costs more than the analyzers' own work.
SPANS_TABLE = "llmtrace_spans"
SPANS_TABLE_DDL = (f"CREATE TABLE IF NOT EXISTS {SPANS_TABLE} ENGINE = MergeTree PARTITION BY toDate(fromUnixTimestamp64Nano(start_ns)) "
                   "ORDER BY (coalesce(stage, ''), trace_id, start_ns) EMPTY AS {select}")
SPANS_MV_DDL = f"CREATE MATERIALIZED VIEW IF NOT EXISTS {SPANS_TABLE}_mv TO {SPANS_TABLE} AS {{select}}"

# One typed row per pass span (the `requests` view: client and server spans apart, each pass value a column),
# filled by a materialized view on llmtrace_spans as spans arrive, so no read parses a pass's JSON again. A
# logical pass joins a client span and the server span under it, which reach ClickHouse in different inserts
# (a materialized view sees one insert block), so the `passes` view joins the two sides of this table when
# read: a join over typed columns, two rows a pass instead of forty spans.
REQUESTS_TABLE = "llmtrace_requests"
REQUESTS_TABLE_DDL = (f"CREATE TABLE IF NOT EXISTS {REQUESTS_TABLE} ENGINE = MergeTree "
                      "PARTITION BY toDate(fromUnixTimestamp64Nano(start_ns)) ORDER BY (trace_id, start_ns) "
                      "SETTINGS allow_nullable_key = 1 EMPTY AS {select}")
REQUESTS_MV_DDL = f"CREATE MATERIALIZED VIEW IF NOT EXISTS {REQUESTS_TABLE}_mv TO {REQUESTS_TABLE} AS {{select}}"


@functools.lru_cache(maxsize=256)
def _transpiled(sql: str) -> tuple[str, ...]:
    """``to_clickhouse`` of a statement without parameters, once per process for each text: every open of a
    store lays the same views, and transpiling them (sqlglot over the registry's long SELECTs) cost more
    than creating them. Keyed on the SQL text, so a view whose definition changes is transpiled anew."""
    return tuple(to_clickhouse(sql))


def requests_table_select(source: str = SPANS_TABLE) -> str:
    """ClickHouse SQL of the ``requests`` rows of ``source``: tracer/storage/views.py's one definition, transpiled."""
    return _transpiled(f"SELECT * FROM ({requests_select(source)})")[0]


DEPLOYS_DDL = ("CREATE TABLE IF NOT EXISTS deploys (name String, service Nullable(String), at_ns Int64, "
               "note Nullable(String)) ENGINE = MergeTree ORDER BY at_ns")

# A map value the exporter wrote with pcommon's AsString: numbers, booleans and lists/maps (JSON text)
# go back to typed JSON, so attributes read as our store's JSON; any other text stays a string. A list
# holding objects is a string an app wrote as JSON (llmtrace.prompt.segments): an OTLP array attribute
# holds primitives (every SDK's attribute type), so it stays the string our store holds.
# A number is one as the writers spell it: pcommon's AsString, Python's json and orjson all write an exponent
# with its sign (1e+21, 1.5e-07), and a double is finite. A hex hash such as `1234e56789012345` is text: read
# as a number it overflows, and one value ClickHouse's JSON parser refuses voids the whole document (every
# value of that span read NULL: its side, so a server pass span became a client pass of its own).
_TYPED = r"^(-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-][0-9]+)?|true|false)$"


def map_json_sql(m: str) -> str:
    """ClickHouse SQL: a Map(String, String) of OTLP attributes as a JSON object text."""
    array = "(startsWith(_v, '[') AND isValidJSON(_v) AND NOT arrayExists(_x -> startsWith(_x, '{'), JSONExtractArrayRaw(_v)))"
    number = f"(match(_v, '{_TYPED}') AND isFinite(toFloat64OrZero(_v)))"
    value = (f"if({number} OR {array} OR (startsWith(_v, '{{') AND isValidJSON(_v)), "
             f"_v, toJSONString(_v))")
    return (f"concat('{{', arrayStringConcat(arrayMap((_k, _v) -> concat(toJSONString(toString(_k)), ':', {value}), "
            f"mapKeys({m}), mapValues({m})), ','), '}}')")


def _attr(m: str, key: str) -> str:
    return f"if(mapContains({m}, '{key}'), {m}['{key}'], NULL)"


# Our spans, read off the exporter's table (tracer/collect/otlp_decode.py is the same mapping for OTLP we receive).
SPANS_SELECT = f"""SELECT
    TraceId AS trace_id, SpanId AS span_id, nullIf(ParentSpanId, '') AS parent_span_id,
    toString(SpanName) AS name,
    transform(toString(SpanKind), ['Server', 'Client', 'Producer', 'Consumer', 'Internal'],
              ['server', 'client', 'producer', 'consumer', 'internal'], 'internal') AS kind,
    {_attr("SpanAttributes", N.GEN_AI_OPERATION_NAME)} AS operation,
    {_attr("SpanAttributes", LLMTRACE_STAGE)} AS stage, {_attr("SpanAttributes", LLMTRACE_PHASE)} AS phase,
    nullIf(toString(ServiceName), '') AS service,
    coalesce({_attr("SpanAttributes", N.SERVICE_VERSION)}, {_attr("ResourceAttributes", N.SERVICE_VERSION)}) AS deploy,
    toInt64(toUnixTimestamp64Nano(Timestamp)) AS start_ns, toInt64(toUnixTimestamp64Nano(Timestamp) + Duration) AS end_ns,
    Duration / 1e6 AS duration_ms,
    multiIf(SpanAttributes['{N.STATUS}'] = 'cancelled', 'cancelled', toString(StatusCode) = 'Error', 'error', 'ok')
        AS status,
    nullIf(StatusMessage, '') AS status_message,
    {map_json_sql("SpanAttributes")} AS attributes,
    {map_json_sql("ResourceAttributes")} AS resource,
    if(empty(`Events.Name`), NULL, concat('[', arrayStringConcat(arrayMap((_n, _t, _a) -> concat(
        '{{"name":', toJSONString(toString(_n)), ',"ts":', toString(toUnixTimestamp64Nano(_t)), ',"attributes":',
        {map_json_sql("_a")}, '}}'), `Events.Name`, `Events.Timestamp`, `Events.Attributes`), ','), ']')) AS events
FROM otel_traces"""


def _kv_map(doc: str) -> str:
    """ClickHouse SQL: a JSON object text as the exporter's Map(String, String) (AsString of each value)."""
    kv = f"JSONExtractKeysAndValuesRaw(coalesce(toString({doc}), '{{}}'))"
    return (f"mapFromArrays(arrayMap(_p -> _p.1, {kv}), "
            f"arrayMap(_p -> if(JSONType(_p.2) = 'String', JSONExtractString(_p.2), _p.2), {kv}))")


def insert_from_parquet_sql(path: str) -> str:
    """INSERT of our spans (a Parquet export, tracer/storage/views.py columns) into otel_traces, each row as the
    Collector's exporter would write the OTLP span: attribute values as strings, ns timestamps, Events."""
    ev = "JSONExtractArrayRaw(coalesce(toString(events), '[]'))"  # a JSON column reads as JSON: as text
    src = "'" + path.replace("'", "\\'") + "'"
    return f"""INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind,
        ServiceName, ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
        `Events.Timestamp`, `Events.Name`, `Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`,
        `Links.Attributes`)
    SELECT fromUnixTimestamp64Nano(toInt64(start_ns)), trace_id, span_id, coalesce(parent_span_id, ''), '',
        coalesce(name, ''),
        transform(coalesce(kind, ''), ['server', 'client', 'producer', 'consumer', 'internal'],
                  ['Server', 'Client', 'Producer', 'Consumer', 'Internal'], 'Unspecified'),
        coalesce(service, ''),
        -- the deploy travels as the resource's service.version (llmtrace.init(deploy=...) sets it so)
        if(deploy IS NULL, {_kv_map("resource")}, mapUpdate({_kv_map("resource")}, map('service.version', assumeNotNull(deploy)))),
        'llmtrace', '',
        {_kv_map("attributes")},
        toUInt64(greatest(toInt64(end_ns) - toInt64(start_ns), 0)),
        multiIf(status = 'error', 'Error', status = 'ok', 'Ok', 'Unset'), coalesce(status_message, ''),
        arrayMap(_e -> fromUnixTimestamp64Nano(JSONExtractInt(_e, 'ts')), {ev}),
        arrayMap(_e -> JSONExtractString(_e, 'name'), {ev}),
        arrayMap(_e -> {_kv_map("JSONExtractRaw(_e, 'attributes')")}, {ev}),
        [], [], [], []
    FROM file({src}, Parquet) SETTINGS input_format_parquet_enable_json_parsing = 0"""


# DuckDB semantics the transpiled SQL relies on: a LEFT JOIN miss is NULL (not the type's default),
# an aggregate over no rows is NULL, and ORDER BY / joins on Nullable keys behave as in DuckDB.
# A column name wins over a same-named alias (DuckDB's `arg_min(deploy, ..) AS deploy ... WHERE deploy ..`).
_SETTINGS = {"join_use_nulls": 1, "aggregate_functions_null_for_empty": 1, "cast_keep_nullable": 1,
             "prefer_column_name_to_alias": 1, "use_variant_as_common_type": 0}


def views(materialized: bool = True) -> list[str]:
    """Every ClickHouse view statement: our spans (the materialized table, or computed over otel_traces on
    each read), then tracer/storage/views.py's views transpiled; with ``materialized`` the ``requests`` view
    reads the typed rows of ``llmtrace_requests`` instead of parsing each pass span's JSON again."""
    return list(_views(tuple(views_sql("spans", "deploys")), materialized))


@functools.lru_cache(maxsize=8)
def _views(statements: tuple[str, ...], materialized: bool) -> tuple[str, ...]:
    out = [f"CREATE OR REPLACE VIEW spans AS SELECT * FROM {SPANS_TABLE}" if materialized
           else f"CREATE OR REPLACE VIEW spans AS {SPANS_SELECT}"]
    swapped = 0
    for stmt in statements:
        if materialized and _view_name(stmt) == "requests":
            # the view is known by what its statement creates (parsed), not by how its text is spelt
            out.append(f"CREATE OR REPLACE VIEW requests AS SELECT * FROM {REQUESTS_TABLE}")
            swapped += 1
            continue
        out.extend(_transpiled(stmt))
    if materialized and swapped != 1:  # views.py stopped defining `requests` (or defines it twice)
        raise ClickHouseError(f"expected one `requests` view among the store's views, found {swapped}")
    return tuple(out)


def _view_name(stmt: str) -> str | None:
    """The view one DuckDB ``CREATE VIEW`` statement creates (None for any other statement)."""
    trees = sqlglot.parse(stmt, read="duckdb")
    tree = trees[0] if len(trees) == 1 else None
    if isinstance(tree, exp.Create) and str(tree.kind).upper() == "VIEW" and isinstance(tree.this, exp.Table):
        return tree.this.name
    return None


# DuckDB client settings the readers set for the terminal's sake; ClickHouse has no such setting
_DUCKDB_ONLY_SET = re.compile(r"\s*SET\s+enable_progress_bar\s*=\s*\w+\s*;?\s*", re.IGNORECASE)


@dataclass
class _Cursor:
    description: list[tuple[str, ...]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def _py(value: Any) -> Any:
    # Arrow maps arrive as lists of (key, value) pairs; DuckDB hands dicts
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return dict(value)
    # DateTime64 arrives zone-aware (UTC); DuckDB's TIMESTAMP is naive UTC
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


class ClickHouseConnection:
    """What the analyzers use of a DuckDB connection, over ClickHouse: each statement transpiled (dialect.py),
    run inside ClickHouse, rows back as tuples. ``execute`` returns self (DuckDB returns the connection too)."""

    def __init__(self, send: Any, close: Any = None, url: str = "") -> None:
        self._send = send  # (sql) -> pyarrow.Table | None
        self._close = close
        self.url = url
        self._cur = _Cursor()
        self.statements = 0
        # the relation with one row per logical pass the analyzers read instead of building passes from the
        # spans' JSON (tracer/storage/store.py pass_table): the `passes` view over llmtrace_requests
        self.pass_table: str | None = None

    def execute(self, sql: str, params: Sequence[object] | None = None) -> ClickHouseConnection:
        if _DUCKDB_ONLY_SET.fullmatch(sql):  # a DuckDB client setting (the progress bar): nothing to set here
            self._cur = _Cursor()
            return self
        try:
            stmts = to_clickhouse(sql, params)
        except TranspileError as exc:
            raise ClickHouseError(f"cannot run on ClickHouse: {exc}") from None
        table = None
        for s in stmts:
            table = self.raw(s)
        self._cur = _Cursor()
        if table is not None:
            self._cur.description = [(n, str(t)) for n, t in zip(table.column_names, table.schema.types, strict=True)]
            cols = [[_py(v) for v in c.to_pylist()] for c in table.columns]
            self._cur.rows = list(zip(*cols, strict=True)) if cols else []
        return self

    def raw(self, sql: str) -> Any:
        """Run one ClickHouse statement as it is; a pyarrow Table for a query."""
        self.statements += 1
        try:
            return self._send(sql)
        except Exception as exc:  # chdb and clickhouse-connect raise their own types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ClickHouseError(f"ClickHouse: {first[:400]}") from None

    @property
    def description(self) -> list[tuple[str, ...]]:
        return self._cur.description

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._cur.rows = self._cur.rows, []
        return rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._cur.rows.pop(0) if self._cur.rows else None

    def local_result(self, sql: str) -> tuple[Any, str]:
        """``llmtrace sql`` over ClickHouse: the query runs inside ClickHouse, its rows land in an in-memory
        DuckDB table, and the printers (tracer/cli/sql_output.py) print from there as for any store."""
        import duckdb

        table = None
        try:
            for s in to_clickhouse(sql):
                table = self.raw(s)
        except TranspileError as exc:
            raise ClickHouseError(f"cannot run on ClickHouse: {exc}") from None
        local = duckdb.connect(":memory:")
        if table is None:
            return local, "SELECT 'ok' AS result"
        local.register("llmtrace_clickhouse_result", table)
        return local, "SELECT * FROM llmtrace_clickhouse_result"

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self) -> ClickHouseConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# what a statement may open with before its first keyword: whitespace, and comments (an analyzer's SQL says
# why it counts what it counts in a leading `--` line)
_LEAD = r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*"


def _is_query(sql: str) -> bool:
    return bool(re.match(rf"{_LEAD}(\(|SELECT|WITH|SHOW|DESCRIBE|EXPLAIN)\b", sql, re.IGNORECASE | re.DOTALL))


def connect(url: str, database: str = "llmtrace") -> ClickHouseConnection:
    """``chdb://PATH`` (in-process, data under PATH) or ``clickhouse://[user[:password]@]HOST[:8123]/DB``."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "chdb":
        try:
            from chdb import session
        except ImportError:
            raise ClickHouseError("chdb:// needs chdb: pip install 'llmtrace-stages[fleet]'") from None

        path = (parsed.netloc + parsed.path) or None
        sess = session.Session(path) if path else session.Session()
        sess.query(f"CREATE DATABASE IF NOT EXISTS {database}")
        sess.query(f"USE {database}")
        for k, v in _SETTINGS.items():  # a session's SET holds for its later queries
            sess.query(f"SET {k} = {v}")

        def send_chdb(sql: str) -> Any:
            if _is_query(sql):
                return sess.query(sql, "ArrowTable")
            sess.query(sql)
            return None

        return ClickHouseConnection(send_chdb, sess.close, url)
    if parsed.scheme in ("clickhouse", "http", "https"):
        try:
            import clickhouse_connect
        except ImportError:
            raise ClickHouseError("clickhouse:// needs clickhouse-connect: pip install 'llmtrace-stages[fleet]'") from None
        db = parsed.path.strip("/") or database
        try:
            client = clickhouse_connect.get_client(
            host=parsed.hostname or "127.0.0.1", port=parsed.port or 8123, username=parsed.username or "default",
                password=urllib.parse.unquote(parsed.password or ""), database=db, secure=parsed.scheme == "https",
                settings=dict(_SETTINGS))
        except Exception as exc:  # noqa: BLE001 - connection refused, auth, unknown database: one clear line
            raise ClickHouseError(f"cannot reach ClickHouse at {url}: {str(exc).splitlines()[0][:300]}") from None

        def send_http(sql: str) -> Any:
            setting = re.fullmatch(r"SET (\w+) = (\w+)", sql.strip())
            if setting:  # each HTTP request is its own session: a SET holds as a client setting
                client.set_client_setting(setting.group(1), setting.group(2))
                return None
            if _is_query(sql):
                return client.query_arrow(sql)
            client.command(sql)
            return None

        return ClickHouseConnection(send_http, client.close, url)
    raise ClickHouseError(f"not a ClickHouse store URL: {url!r} (chdb://PATH or clickhouse://HOST:8123/DB)")


def ensure_views(conn: ClickHouseConnection, create_table: bool = False, materialized: bool = True) -> None:
    """Create (or replace) the read views; with ``create_table``, the exporter's otel_traces too.

    ``materialized``: our spans live in ``llmtrace_spans``, filled by a materialized view as rows reach
    otel_traces. When the table is new, the rows otel_traces already holds are copied in once (those
    older than the view: a span inserted in between is not lost, one with an older timestamp arriving
    during the copy may be counted twice)."""
    if create_table:
        conn.raw(OTEL_TRACES_DDL)
    conn.raw(DEPLOYS_DDL)
    if materialized:
        have = set(conn.raw(f"SELECT name FROM system.tables WHERE database = currentDatabase() AND name IN "
                            f"('{SPANS_TABLE}', '{REQUESTS_TABLE}')").column(0).to_pylist())
        if SPANS_TABLE not in have:
            conn.raw(SPANS_TABLE_DDL.format(select=SPANS_SELECT))
        if REQUESTS_TABLE not in have:
            requests = requests_table_select(SPANS_TABLE)
            # before the spans' copy below, so the spans copied in flow on into it
            conn.raw(REQUESTS_TABLE_DDL.format(select=requests))
            cutoff_ns = int(conn.raw("SELECT toUnixTimestamp64Nano(now64(9))").column(0).to_pylist()[0])
            conn.raw(REQUESTS_MV_DDL.format(select=requests))
            if SPANS_TABLE in have:  # an older llmtrace made the spans table: its pass spans, once
                older = f"(SELECT * FROM {SPANS_TABLE} WHERE start_ns < {cutoff_ns})"
                conn.raw(f"INSERT INTO {REQUESTS_TABLE} {requests_table_select(older)}")
        if SPANS_TABLE not in have:
            cutoff = conn.raw("SELECT toString(now64(9))").column(0).to_pylist()[0]
            conn.raw(SPANS_MV_DDL.format(select=SPANS_SELECT))
            conn.raw(f"INSERT INTO {SPANS_TABLE} {SPANS_SELECT} WHERE Timestamp < toDateTime64('{cutoff}', 9)")
        else:
            _upgrade_spans_view(conn)
    for stmt in views(materialized):
        conn.raw(stmt)
    conn.pass_table = "passes" if materialized else None


# what the spans mapping has that the one before it lacked: a number must be finite (map_json_sql)
_MAPPING_MARK = "isFinite(toFloat64OrZero(_v))"
# a span an older mapping wrote with a document ClickHouse cannot parse (all its values read NULL)
_UNREADABLE = ("NOT isValidJSON(attributes) OR NOT isValidJSON(resource) OR "
               "(events IS NOT NULL AND NOT isValidJSON(events))")


def _upgrade_spans_view(conn: ClickHouseConnection) -> None:
    """A store an older llmtrace prepared keeps its materialized view's mapping: give the view this one, and
    write again, from otel_traces, the spans the older one left unreadable (a hash read as an out-of-range
    number): their rows in llmtrace_requests go, the spans are inserted anew (the pass table's view takes
    them on), and the unreadable rows are deleted. Not atomic: a read in between may see a span twice."""
    got = conn.raw(f"SELECT as_select FROM system.tables WHERE database = currentDatabase() "
                   f"AND name = '{SPANS_TABLE}_mv'").column(0).to_pylist()
    if not got or _MAPPING_MARK in str(got[0]):
        return
    conn.raw(f"ALTER TABLE {SPANS_TABLE}_mv MODIFY QUERY {SPANS_SELECT}")
    bad = f"(SELECT trace_id, span_id FROM {SPANS_TABLE} WHERE {_UNREADABLE})"
    if not conn.raw(f"SELECT count() FROM {bad}").column(0).to_pylist()[0]:
        return
    conn.raw(f"DELETE FROM {REQUESTS_TABLE} WHERE (trace_id, span_id) IN {bad}")
    conn.raw(f"INSERT INTO {SPANS_TABLE} {SPANS_SELECT} WHERE (TraceId, SpanId) IN {bad}")
    conn.raw(f"DELETE FROM {SPANS_TABLE} WHERE {_UNREADABLE}")


@contextmanager
def open_read(url: str, span_filter: SpanFilter | None = None, locked: bool = False) -> Iterator[ClickHouseConnection]:
    """The read commands' connection to a ClickHouse store: views in place (over the exporter's otel_traces),
    closed on exit. ``locked`` (``llmtrace sql``) makes the session read-only for the statements that follow."""
    if span_filter is not None and span_filter.where():
        raise ClickHouseError("--service/--since on `llmtrace sql` over ClickHouse is not supported yet: "
                              "filter in the query (WHERE service = ..., start_ns >= ...)")
    conn = open_views(url)
    try:
        if locked:
            conn.raw("SET readonly = 2")
        yield conn
    finally:
        conn.close()


def open_views(url: str) -> ClickHouseConnection:
    """A connection to the ClickHouse store at ``url`` with the read views in place (the caller closes it);
    ClickHouseError when it has no exporter table."""
    conn = connect(url)
    try:
        if not scalar(conn.execute("SELECT count() FROM system.tables WHERE database = currentDatabase() "
                                   "AND name = 'otel_traces'")):
            raise ClickHouseError(f"no otel_traces table at {url} (the Collector's clickhouse exporter creates it)")
        ensure_views(conn)
    except BaseException:
        conn.close()
        raise
    return conn
