"""The records readers copy store rows into are defined once (issue 34): the explorer's request row is read by
its own fields from the ``requests`` view, a trace's spans by one column list into one span record (the report
and the explorer alike), and a pass's summary values come from the registry."""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

import pytest

from llmtrace.report.data import Span
from llmtrace.report.traces import PASS_KEYS
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stages
from llmtrace.tracer.registry.pass_values import VIEW_COLUMNS
from llmtrace.tracer.registry.semconv import ERROR_TYPE, HTTP_RESPONSE_STATUS_CODE
from llmtrace.tracer.registry.stages import DECLARED, PASS_SUMMARY, PASS_VALUES, REQUEST_ROW, SELF_MS
from llmtrace.tracer.storage.span_records import (
    SPAN_RECORD_COLUMNS,
    SpanRecord,
    decode_attributes,
    span_record,
)
from llmtrace.tracer.storage.store import read_connection
from llmtrace.tui.data.records import RequestRow
from llmtrace.tui.data.store_reader import REQUEST_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from synthetic_store import make_store  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("rr") / "s.duckdb", passes=5, seed=1)


def test_a_request_row_is_the_registry_s_and_reads_from_the_requests_view(db: Path) -> None:
    assert REQUEST_COLUMNS.split(", ") == list(REQUEST_ROW)
    assert sorted(REQUEST_ROW) == sorted(f.name for f in fields(RequestRow)), "RequestRow has a field a column"
    with read_connection(db) as conn:
        rows = conn.execute(f"SELECT {REQUEST_COLUMNS} FROM requests ORDER BY start_ns").fetchall()
    got = [RequestRow(**dict(zip(REQUEST_ROW, r, strict=True))) for r in rows]
    assert got and all(r.trace_id and r.span_id and r.model for r in got)


def test_the_registry_refuses_a_request_row_column_the_views_lack() -> None:
    assert stages.view_columns_of(("trace_id", "ttft_ms"), PASS_VALUES, VIEW_COLUMNS) == ("trace_id", "ttft_ms")
    with pytest.raises(ValueError, match="ttft_msec"):
        stages.view_columns_of(("trace_id", "ttft_msec"), PASS_VALUES, VIEW_COLUMNS)


def test_the_report_and_the_explorer_share_one_span_record(db: Path) -> None:
    assert Span is SpanRecord
    with read_connection(db) as conn:
        tid = conn.execute("SELECT trace_id FROM spans WHERE stage IS NOT NULL LIMIT 1").fetchone()[0]
        rows = conn.execute(f"SELECT {SPAN_RECORD_COLUMNS} FROM spans WHERE trace_id = ? ORDER BY start_ns",
                            [tid]).fetchall()
    spans = [span_record(r) for r in rows]
    assert any(s.is_pass for s in spans) and any(s.stage for s in spans)
    assert all(isinstance(s.attributes.get(N.SIDE, ""), str) for s in spans)
    marked = span_record(rows[0], lambda v: v.upper() if isinstance(v, str) else v)
    assert marked.span_id == rows[0][0].upper()


def test_decode_attributes_keeps_objects_only() -> None:
    assert decode_attributes(f'{{"{SELF_MS}": 2.5}}') == {SELF_MS: 2.5}
    assert decode_attributes("[1, 2]") == {} and decode_attributes("not json") == {} and decode_attributes(None) == {}


def test_a_pass_summary_is_the_registry_s() -> None:
    ranked = [v for v in DECLARED.values() if v.summary]
    assert len({v.summary for v in ranked}) == len(ranked), "two values share a summary place"
    assert PASS_KEYS is stages.PASS_KEYS, "the report lists the registry's pass keys"
    assert PASS_KEYS == (*PASS_SUMMARY, HTTP_RESPONSE_STATUS_CODE, ERROR_TYPE)
    assert PASS_SUMMARY[:2] == (N.GEN_AI_REQUEST_MODEL, N.GEN_AI_RESPONSE_MODEL)
    assert PASS_SUMMARY[-3:] == (N.SERVICE_VERSION, N.PROMPT_HASH, N.OUTPUT_HASH)
