"""The explorer's data layer over a real recorded store: filter language, pages, sort, traces, cache."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from llmtrace.tracer.storage.store import StoreError
from llmtrace.tui.data.filter_expr import FilterError, compile_filter
from llmtrace.tui.data.store_reader import SORT_COLUMNS, StoreReader
from llmtrace.tui.data.waterfall_model import build_rows


def test_filter_language_compiles_units_and_lists() -> None:
    f = compile_filter("ttft>2s tpot<=40ms hit<50% finish=length,stop model~SMOL")
    assert "ttft_ms > ?" in f.where and "tpot_ms <= ?" in f.where
    assert f.params[:3] == (2000.0, 40.0, 0.5)
    assert "IN (?, ?)" in f.where and ("length", "stop") == f.params[3:5]
    assert f.params[5] == "%smol%"
    assert compile_filter("").empty


@pytest.mark.parametrize("text, message", [
    ("ttft>fast", "not like 2s"), ("colour=red", "unknown field"), ("finish>3", "finish takes = or !="), ("deploy>3", "does not apply to text"),
    ("ttft~2", "text fields only"), ('model="x', "unbalanced"), ("deploy=", "no value"),
])
def test_filter_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        compile_filter(text)


def test_every_registry_view_column_is_a_filter_field_that_runs(support_store: Path) -> None:
    # the filter fields come from the registry: each declared view column is one, and each compiles to SQL
    # that runs on a real store's requests view
    from llmtrace.tracer.storage.views import REQUEST_VALUES
    from llmtrace.tui.data.filter_expr import FIELDS

    columns = {f.column for f in FIELDS.values()}
    assert {v.column for v in REQUEST_VALUES} <= columns
    samples = {"duration": "1s", "count": "1", "ratio": "50%", "money": "0.01", "text": "x", "id": "ab",
               "finish": "length", "since": "2h"}
    conn = duckdb.connect(str(support_store), read_only=True)
    try:
        for name, field in FIELDS.items():
            op = "=" if field.kind in ("text", "id", "finish", "since") else ">"
            f = compile_filter(f"{name}{op}{samples[field.kind]}")
            conn.execute(f"SELECT count(*) FROM requests WHERE {f.where}", list(f.params)).fetchone()
    finally:
        conn.close()


def test_filters_select_the_right_passes(support_store: Path) -> None:
    reader = StoreReader(support_store)
    everything = reader.request_page(compile_filter(""), limit=500)
    assert everything.total == everything.store_passes == 32 and len(everything.rows) == 32
    slow = reader.request_page(compile_filter("ttft>1s"), limit=500)
    assert slow.total == 16 and all(r.ttft_ms > 1000 for r in slow.rows)
    assert {r.deploy for r in slow.rows} == {"v2"}
    cut = reader.request_page(compile_filter("finish=length"), limit=500)
    assert cut.total == 4 and {r.finish_reason for r in cut.rows} == {"length"}
    assert reader.request_page(compile_filter("finish=MAX_TOKENS"), limit=500).total == 4  # any spelling
    server_v1 = reader.request_page(compile_filter("deploy=v1 side=server"), limit=500)
    assert server_v1.total == 8 and all(r.side == "server" and r.deploy == "v1" for r in server_v1.rows)
    cold = reader.request_page(compile_filter("hit<10%"), limit=500)
    assert cold.total == 16 and all(r.hit_ratio == 0 for r in cold.rows)
    one = everything.rows[0].trace_id
    by_trace = reader.request_page(compile_filter(f"trace={one[:8]}"), limit=500)
    assert {r.trace_id for r in by_trace.rows} == {one} and by_trace.total == 4
    words = reader.request_page(compile_filter("r1 tool_calls"), limit=500)
    assert words.total > 0 and all(r.replica == "r1" and r.finish_reason == "tool_calls" for r in words.rows)


@pytest.mark.parametrize("sort", sorted(SORT_COLUMNS))
def test_every_column_sorts_in_sql_and_pages_do_not_overlap(support_store: Path, sort: str) -> None:
    reader = StoreReader(support_store)
    first = reader.request_page(compile_filter(""), sort=sort, descending=True, offset=0, limit=10)
    second = reader.request_page(compile_filter(""), sort=sort, descending=True, offset=10, limit=10)
    assert len(first.rows) == len(second.rows) == 10
    assert not {r.span_id for r in first.rows} & {r.span_id for r in second.rows}
    attr = {"time": "start_ns", "prompt": "prompt_tokens", "cached": "cached_tokens", "hit": "hit_ratio",
            "ttft": "ttft_ms", "tpot": "tpot_ms", "output": "output_tokens", "finish": "finish_reason",
            "duration": "duration_ms", "cost": "cost_usd", "trace": "trace_id"}.get(sort, sort)
    values = [getattr(r, attr) for r in first.rows + second.rows]
    known = [v for v in values if v is not None]
    assert values[: len(known)] == known and known == sorted(known, reverse=True)  # NULLS LAST


def test_trace_lays_out_client_and_server_passes_with_tools_between(support_store: Path) -> None:
    reader = StoreReader(support_store)
    page = reader.request_page(compile_filter("side=client"), sort="time", descending=False, limit=1)
    trace = reader.trace(page.rows[0].trace_id)
    rows = build_rows(trace)
    kinds = [(r.kind, r.depth) for r in rows]
    assert rows[0].span.name == "invoke_agent support-agent" and rows[0].depth == 0
    passes = [r for r in rows if r.kind == "pass"]
    assert [p.span.side for p in passes] == ["client", "server", "client", "server"]
    assert passes[1].depth == passes[0].depth + 1  # server pass sits under its client pass
    tools = [i for i, r in enumerate(rows) if r.kind == "tool"]
    answer = rows.index(passes[2])
    assert len(tools) == 2 and rows.index(passes[1]) < tools[0] < tools[1] < answer  # decide → tools → answer
    assert ("stage", 3) in kinds and all(r.phase for r in rows if r.kind == "stage")
    only_cache = build_rows(trace, {"cache"})
    assert {r.span.stage for r in only_cache if r.kind == "stage"} == {"cache.prefix_match"}
    assert len([r for r in only_cache if r.kind == "pass"]) == 4 and not [r for r in only_cache if r.kind == "tool"]


def test_cache_report_shows_the_drop_at_the_deploy(support_store: Path) -> None:
    report = StoreReader(support_store).cache_report(buckets=60)
    assert [m.name for m in report.deploys] == ["v2"]
    rates = [b.hit_rate for b in report.buckets if b.hit_rate is not None]
    assert rates[0] > 0.7 and rates[-1] == 0
    costs = {c.deploy: c for c in report.costs}
    assert set(costs) == {"v1", "v2"} and costs["v1"].passes == costs["v2"].passes == 8  # server side only
    assert costs["v1"].hit_rate > 0.7 and costs["v2"].hit_rate == 0
    assert costs["v2"].cost_per_request_usd > costs["v1"].cost_per_request_usd
    assert costs["v2"].ttft_p50_ms > costs["v1"].ttft_p50_ms


def test_missing_corrupt_and_foreign_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        StoreReader(tmp_path / "nope.duckdb").check()
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"this is not a database" * 200)
    with pytest.raises(StoreError, match="not a readable llmtrace store|cannot open"):
        StoreReader(junk).check()
    foreign = tmp_path / "other.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (x INT)")
    con.close()
    with pytest.raises(StoreError, match="not an llmtrace store"):
        StoreReader(foreign).check()


def test_empty_store_reads_as_empty(empty_store_path: Path) -> None:
    reader = StoreReader(empty_store_path)
    assert reader.check().passes == 0
    page = reader.request_page(compile_filter(""))
    assert page.total == page.store_passes == 0 and page.rows == ()
    assert reader.cache_report().buckets == ()


def test_finish_filter_matches_every_providers_spelling_of_the_length_cap(support_store: Path) -> None:
    from llmtrace.tracer.storage.store import write_connection

    with write_connection(support_store) as conn:  # two of the four cut passes as Anthropic spells them
        conn.execute("""UPDATE spans SET attributes = json_merge_patch(attributes,
                            '{"gen_ai.response.finish_reasons": ["max_tokens"]}')
                        WHERE span_id IN (SELECT span_id FROM requests WHERE finish_reason = 'length'
                                          ORDER BY span_id LIMIT 2)""")
    reader = StoreReader(support_store)
    cut = reader.request_page(compile_filter("finish=length"), limit=500)
    assert cut.total == 4 and sorted(r.finish_reason for r in cut.rows) == ["length", "length", "max_tokens",
                                                                            "max_tokens"]
    assert reader.request_page(compile_filter("finish!=length"), limit=500).total == 28
