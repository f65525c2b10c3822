"""The per-pass table of a DuckDB store (tracer/storage/pass_table.py): the writer that ``llmtrace collect`` and the
in-app exporter share keeps ``llmtrace_passes`` batch by batch, in the spans' transaction (traces waiting for the
next fold read from their spans); ``diagnose`` reads it where its stamp says it is current, with the findings the
spans give."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from llmtrace.analyzers import run_analyzers
from llmtrace.cli import main
from llmtrace.tracer import recording as rec
from llmtrace.tracer.storage import pass_table
from llmtrace.tracer.storage.retention import RetentionPolicy
from llmtrace.tracer.storage.span_rows import insert_table
from llmtrace.tracer.storage.span_writer import SpanWriter
from llmtrace.tracer.storage.store import pass_table as bound_table
from llmtrace.tracer.storage.store import read_connection, read_store, write_connection

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "collector"))
from collector_helpers import otlp_provider, start_collector  # noqa: E402
from synthetic_store import make_store  # noqa: E402

PASS_COLS = ("trace_id, span_id, client_span_id, server_span_id, observed_by, deploy, start_ns, prompt_tokens, "
             "cached_tokens, hit_ratio, ttft_ms, finish_reason, cost_usd")


def _key(findings: list) -> list[tuple]:
    return [(f.symptom, f.stage, f.title, f.summary, f.trace_ids,
             tuple((e.label, str(e.value), e.unit, str(e.baseline)) for e in f.evidence)) for f in findings]


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """A synthetic store's spans (planted causes), shuffled: a pass's client and server spans and a trace's
    spans land in different batches."""
    db = make_store(tmp_path_factory.mktemp("pt") / "syn.duckdb", passes=200, seed=2)
    with read_connection(db) as conn:
        return conn.sql("SELECT * FROM spans ORDER BY hash(span_id)").to_arrow_table()


def _write(db: Path, batches: list[pa.Table], **kw: object) -> SpanWriter:
    w = SpanWriter(db, **kw)  # type: ignore[arg-type]
    w.start()
    for b in batches:
        w.offer(b)
        w.flush(30)  # one transaction a batch: the pass table follows every one
    assert w.close() == 0 and w.dropped_rows == 0
    return w


def test_writer_keeps_the_pass_table_and_diagnose_reads_it(spans: pa.Table, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "kept.duckdb"
    step = spans.num_rows // 7 + 1
    _write(db, [spans.slice(i, step) for i in range(0, spans.num_rows, step)])  # within one fold interval
    with read_connection(db) as conn:
        assert pass_table.is_current(conn)
        # batches came faster than the fold: the later traces wait, read from their spans
        waiting = conn.execute("SELECT count(DISTINCT trace_id) FROM llmtrace_passes_dirty").fetchall()[0][0]
        in_table = conn.execute("SELECT count(*) FROM llmtrace_passes").fetchall()[0][0]
        assert waiting > 0 and in_table > 0
        kept = conn.execute(f"SELECT {PASS_COLS} FROM {pass_table.kept_relation(conn)} ORDER BY span_id").fetchall()
        built = conn.execute(f"SELECT {PASS_COLS} FROM passes ORDER BY span_id").fetchall()
        assert bound_table(conn) is None  # a plain connection: the spans, as before
        from_spans = run_analyzers(conn)
    assert kept == built and len(kept) == 200 and {r[4] for r in kept} == {"both"}
    with write_connection(db) as conn:  # the writer's next fold: the waiting traces' passes go into the table
        conn.execute("BEGIN")
        pass_table.fold(conn)
        conn.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM llmtrace_passes_dirty").fetchall() == [(0,)]
        assert conn.execute(f"SELECT {PASS_COLS} FROM llmtrace_passes ORDER BY span_id").fetchall() == built
        assert pass_table.kept_relation(conn) == "llmtrace_passes"
    with read_store(db) as conn:  # what diagnose and check open
        assert bound_table(conn) == pass_table.kept_relation(conn)
        from_table = run_analyzers(conn)
    assert len(from_spans) >= 8 and _key(from_table) == _key(from_spans)
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["symptom"], f["stage"], f["title"]) for f in printed] == [(f.symptom, f.stage, f.title)
                                                                        for f in from_spans]


def test_a_write_that_skipped_the_table_is_noticed_and_mended(spans: pa.Table, tmp_path: Path) -> None:
    db = tmp_path / "stale.duckdb"
    half = spans.num_rows // 2
    _write(db, [spans.slice(0, half)])
    with write_connection(db) as conn:  # spans written past the writer (an older llmtrace, a tool)
        insert_table(conn, spans.slice(half, 100))
    with read_store(db) as conn:
        assert not pass_table.is_current(conn) and bound_table(conn) is None  # passes from the spans again
    _write(db, [spans.slice(half + 100)])  # the next batch rebuilds the table whole
    with read_store(db) as conn:
        kept = bound_table(conn)
        assert kept is not None
        assert conn.execute(f"SELECT {PASS_COLS} FROM {kept} ORDER BY span_id").fetchall() == \
            conn.execute(f"SELECT {PASS_COLS} FROM passes ORDER BY span_id").fetchall()
    # an edit by hand keeps the span count: the fingerprint of the pass spans still tells
    with write_connection(db) as conn:
        conn.execute("UPDATE spans SET deploy = 'hand-fixed' WHERE deploy = 'v2'")
    with read_store(db) as conn:
        assert bound_table(conn) is None
        assert conn.execute("SELECT count(*) FROM passes WHERE deploy = 'hand-fixed'").fetchall()[0][0] > 0
    one = spans.slice(0, 1)  # a new span: a writer's first batch checks the whole fingerprint, and rebuilds
    for col in ("trace_id", "span_id"):
        one = one.set_column(one.schema.get_field_index(col), col, pa.array(["f" * (32 if col == "trace_id" else 16)]))
    _write(db, [one])
    with read_store(db) as conn:
        kept = bound_table(conn)
        assert kept is not None
        assert conn.execute(f"SELECT count(*) FROM {kept} WHERE deploy = 'hand-fixed'").fetchall() == \
            conn.execute("SELECT count(*) FROM passes WHERE deploy = 'hand-fixed'").fetchall()
    # LLMTRACE_PASS_TABLE=0: the writer leaves it alone, and readers see that it is behind
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(pass_table.ENV, "0")
        db2 = tmp_path / "off.duckdb"
        _write(db2, [spans.slice(0, 1000)])
        with read_store(db2) as conn:
            assert bound_table(conn) is None
            assert not conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'llmtrace_passes'"
                                    ).fetchone()[0]


def test_retention_takes_the_passes_of_the_traces_it_drops(spans: pa.Table, tmp_path: Path) -> None:
    db = tmp_path / "ret.duckdb"
    old_traces = spans.column("trace_id").unique().to_pylist()[:50]
    old = pa.compute.is_in(spans.column("trace_id"), value_set=pa.array(old_traces))
    two_days = 2 * 86_400 * 10**9
    aged = spans.filter(old)
    aged = aged.set_column(aged.schema.get_field_index("start_ns"), "start_ns",
                           pa.compute.subtract(aged.column("start_ns"), two_days))
    aged = aged.set_column(aged.schema.get_field_index("end_ns"), "end_ns",
                           pa.compute.subtract(aged.column("end_ns"), two_days))
    fresh = spans.filter(pa.compute.invert(old))
    _write(db, [aged])  # no retention yet: the old traces are in
    with read_connection(db) as conn:
        assert conn.execute("SELECT count(DISTINCT trace_id) FROM llmtrace_passes").fetchone() == (len(old_traces),)
    _write(db, [fresh], retention=RetentionPolicy(max_age_s=86_400.0))
    with read_store(db) as conn:
        assert bound_table(conn) == "llmtrace_passes"
        left = {r[0] for r in conn.execute("SELECT DISTINCT trace_id FROM llmtrace_passes").fetchall()}
        assert left and not left & set(old_traces)
        assert conn.execute(f"SELECT {PASS_COLS} FROM llmtrace_passes ORDER BY span_id").fetchall() == \
            conn.execute(f"SELECT {PASS_COLS} FROM passes ORDER BY span_id").fetchall()


def test_collector_keeps_the_pass_table_across_requests(tmp_path: Path) -> None:
    """The public face: OTLP from the stock exporter to ``llmtrace collect``; the server pass span is sent and
    committed before the client pass span above it, and the table joins them into one pass."""
    col = start_collector(tmp_path)
    tp = otlp_provider(col.endpoint, "agent", **{"service.version": "v3"})
    rec.configure(tp.get_tracer("llmtrace"), strict=True)
    try:
        with rec.start_pass("smol", side="client", attributes={"gen_ai.usage.input_tokens": 100}) as client:
            with rec.start_pass("smol", side="server", parent=client, attributes={
                    "gen_ai.usage.input_tokens": 120, "gen_ai.usage.cache_read.input_tokens": 90,
                    "llmtrace.ttft_ms": 41.5}):
                pass
            tp.force_flush()
            col.wait_written(1)
            time.sleep(0.2)
        tp.shutdown()
        col.wait_written(2)
    finally:
        rec.configure(None)
        col.stop()
    with read_store(col.db) as conn:  # what diagnose reads: the kept passes, the client's trace waiting
        kept = bound_table(conn)
        assert kept is not None
        rows = conn.execute(f"SELECT {PASS_COLS} FROM {kept}").fetchall()
        assert rows == conn.execute(f"SELECT {PASS_COLS} FROM passes").fetchall()
    assert len(rows) == 1 and rows[0][4] == "both" and rows[0][5] == "v3" and rows[0][7] == 120
