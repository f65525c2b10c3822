"""Retention: --max-age and --max-size drop the oldest whole traces; the collector runs it periodically."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest
from collector_helpers import query, start_collector

from llmtrace.tracer.record.exporter import ARROW_SCHEMA, insert_arrow
from llmtrace.tracer.storage.retention import RetentionPolicy, enforce, parse_age, parse_size, used_bytes
from llmtrace.tracer.storage.store import write_connection

HOUR = 3600 * 10**9


def spans_table(first_trace: int, traces: int, per_trace: int, end_ns: np.ndarray) -> pa.Table:
    """``traces`` traces of ``per_trace`` spans; trace k's spans end at end_ns[k] (minus a little)."""
    n = traces * per_trace
    tr = np.repeat(np.arange(first_trace, first_trace + traces), per_trace)
    ends = np.repeat(end_ns, per_trace) - np.tile(np.arange(per_trace), traces) * 1000
    rng = np.random.default_rng(first_trace)
    noise = rng.integers(0, 2**62, n)  # incompressible enough that size tracks span count
    cols = {
        "trace_id": pa.array([f"{t:032x}" for t in tr]),
        "span_id": pa.array([f"{i:016x}" for i in noise]),
        "parent_span_id": pa.nulls(n, pa.string()),
        "name": pa.array(["op"] * n), "kind": pa.array(["internal"] * n), "operation": pa.nulls(n, pa.string()),
        "stage": pa.nulls(n, pa.string()), "phase": pa.nulls(n, pa.string()), "service": pa.array(["svc"] * n),
        "deploy": pa.nulls(n, pa.string()), "start_ns": pa.array(ends - 1000), "end_ns": pa.array(ends),
        "duration_ms": pa.array(np.full(n, 0.001)), "status": pa.array(["ok"] * n),
        "status_message": pa.nulls(n, pa.string()),
        "attributes": pa.array([f'{{"x":{i}}}' for i in noise]), "resource": pa.array(['{"service.name":"svc"}'] * n),
        "events": pa.nulls(n, pa.string()),
    }
    return pa.Table.from_pydict(cols, schema=ARROW_SCHEMA)


def test_parse_size_and_age() -> None:
    assert parse_size("10GB") == 10 << 30 and parse_size("1.5MiB") == 3 << 19 and parse_size("123") == 123
    assert parse_age("30d") == 30 * 86400 and parse_age("12h") == 43200 and parse_age("90m") == 5400
    for bad in ("", "ten", "-1GB", "5XB"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_age("30")
    with pytest.raises(ValueError):
        RetentionPolicy(max_bytes=0)


def test_max_age_drops_whole_old_traces(store_path: Path) -> None:
    now = time.time_ns()
    with write_connection(store_path) as conn:
        insert_arrow(conn, spans_table(0, 10, 3, np.full(10, now - 48 * HOUR)))  # old
        insert_arrow(conn, spans_table(10, 10, 3, np.full(10, now - HOUR // 2)))  # recent
        # a trace that started long ago but whose last span is recent stays whole
        insert_arrow(conn, spans_table(20, 1, 1, np.array([now - 48 * HOUR])))
        insert_arrow(conn, spans_table(20, 1, 1, np.array([now - 60 * 10**9])))
    result = enforce(store_path, RetentionPolicy(max_age_s=parse_age("1d")))
    assert (result.deleted_traces, result.deleted_spans) == (10, 30)
    rows = query(store_path, "SELECT trace_id, count(*) FROM spans GROUP BY 1 ORDER BY 1")
    assert [int(t, 16) for t, _ in rows] == list(range(10, 21)) and rows[-1][1] == 2
    assert enforce(store_path, RetentionPolicy(max_age_s=86400)).deleted_spans == 0


@pytest.mark.slow
def test_max_size_drops_the_oldest_traces_and_frees_space(store_path: Path) -> None:
    now = time.time_ns()
    traces, per = 20_000, 5  # 4 inserts of 100k spans: several DuckDB row groups
    for k in range(4):
        ends = now - HOUR + (k * traces + np.arange(traces)) * 10**6
        with write_connection(store_path) as conn:
            insert_arrow(conn, spans_table(k * traces, traces, per, ends))
    with write_connection(store_path) as conn:
        before = used_bytes(conn)
    cap = before // 2
    result = enforce(store_path, RetentionPolicy(max_bytes=cap))
    kept = query(store_path, "SELECT count(*), count(DISTINCT trace_id), min(trace_id) FROM spans")[0]
    assert result.deleted_spans + kept[0] == 4 * traces * per
    assert kept[0] <= 4 * traces * per * 0.5 and kept[0] >= 4 * traces * per * 0.3
    assert kept[1] * per == kept[0]  # whole traces only
    assert int(kept[2], 16) == 4 * traces - kept[1]  # and the newest ones are those kept
    with write_connection(store_path) as conn:
        conn.execute("CHECKPOINT")
        after = used_bytes(conn)
    # DuckDB frees the blocks of deleted rows by row group (122,880 rows), so the cap holds to within one
    # row group: here the store went from 4 row groups to under 2.5.
    assert after < 0.6 * before, (before, cap, after)
    # no cascade: running again right away deletes nothing more
    assert enforce(store_path, RetentionPolicy(max_bytes=cap)).deleted_spans == 0


def test_collector_applies_max_age_periodically(tmp_path: Path) -> None:
    from test_collector_bad_input import PB, _request

    col = start_collector(tmp_path, "--max-age", "1h", "--retention-every", "0.3")
    try:
        old = _request(50, 1)
        for s in old.resource_spans[0].scope_spans[0].spans:
            s.start_time_unix_nano -= 3 * HOUR
            s.end_time_unix_nano -= 3 * HOUR
        assert httpx.post(col.endpoint, content=old.SerializeToString(), headers=PB).status_code == 200
        assert httpx.post(col.endpoint, content=_request(20, 2).SerializeToString(), headers=PB).status_code == 200
        deadline = time.monotonic() + 20
        while col.stats()["retention_deleted_spans"] < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert col.stats()["retention_deleted_spans"] == 50
    finally:
        assert col.stop() == 0
    assert query(tmp_path / "collected.duckdb", "SELECT count(*) FROM spans") == [(20,)]
