"""The typed read API (tracer/storage/typed_values.py): a reader names a value by its registry constant and the
registry gives the type; a value the stage does not declare fails at once instead of reading NULL forever."""

from __future__ import annotations

import duckdb
import pytest

from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.semconv import ERROR_TYPE
from llmtrace.tracer.registry.stages import SELF_MS, get_stage
from llmtrace.tracer.storage.typed_values import UndeclaredValueError, attr, typed, value_type
from llmtrace.tracer.storage.views import TABLES_SQL


def test_types_come_from_the_stage_declaration() -> None:
    got = typed(S.CACHE_EVICTION, {"evicted": N.EVICTION_BLOCKS_EVICTED, "policy": N.EVICTION_POLICY,
                                   "own": SELF_MS})
    assert got == {"evicted": (N.EVICTION_BLOCKS_EVICTED, get_stage(S.CACHE_EVICTION).value(
        N.EVICTION_BLOCKS_EVICTED).type), "policy": (N.EVICTION_POLICY, "str"), "own": (SELF_MS, "float")}
    assert value_type(N.TOKENIZATION_BLOCK_HASHES) == "str[]"


def test_a_value_the_stage_does_not_declare_is_an_error() -> None:
    with pytest.raises(UndeclaredValueError, match="declares no value"):
        typed(S.CACHE_EVICTION, {"x": N.PREFILL_MS})  # a forward.prefill value read off the eviction stage
    with pytest.raises(UndeclaredValueError):
        attr("llmtrace.no_such.value")


def test_attr_casts_as_declared() -> None:
    assert attr(N.BLOCKS_BLOCK_SIZE).startswith("TRY_CAST(") and "BIGINT" in attr(N.BLOCKS_BLOCK_SIZE)
    assert attr(N.TOKENIZATION_BLOCK_HASHES).endswith("[*]')")
    # a name of another vocabulary the registry does not declare reads as its text, as before
    assert attr(ERROR_TYPE) == f"json_extract_string(attributes, '$.\"{ERROR_TYPE}\"')"
    assert attr(N.BLOCKS_BLOCK_SIZE, "str", "c.attributes") == \
        f"json_extract_string(c.attributes, '$.\"{N.BLOCKS_BLOCK_SIZE}\"')"


def test_a_stage_read_returns_typed_values_from_a_real_store() -> None:
    conn = duckdb.connect()
    conn.execute(TABLES_SQL)
    conn.execute("INSERT INTO spans (trace_id, span_id, stage, start_ns, duration_ms, attributes) VALUES "
                 f"('t', 's', '{S.CACHE_EVICTION}', 1, 2.0, ?)",
                 [f'{{"{N.EVICTION_BLOCKS_EVICTED}": 7, "{N.EVICTION_POLICY}": "lru", "{SELF_MS}": 1.5}}'])
    q = Query(conn)
    rows = q.stage(S.CACHE_EVICTION, {"evicted": N.EVICTION_BLOCKS_EVICTED, "policy": N.EVICTION_POLICY,
                                      "own": SELF_MS})
    assert [(r["evicted"], r["policy"], r["own"]) for r in rows] == [(7, "lru", 1.5)]
    found = q.flagged(S.CACHE_EVICTION, {"evicted": N.EVICTION_BLOCKS_EVICTED}, "evicted > 5", "sum(evicted) AS e")
    assert found is not None and found[0]["e"] == 7 and found[1] == ("t",)


def test_a_writer_s_none_sentinel_reads_as_none_everywhere() -> None:
    """The engine writes first_miss_token -1 for "no token missed": every typed read shows None, never -1."""
    from llmtrace.tracer.storage.views import stage_values_select

    conn = duckdb.connect()
    conn.execute(TABLES_SQL)
    for span, miss in (("s1", -1), ("s2", 40)):
        conn.execute("INSERT INTO spans (trace_id, span_id, stage, start_ns, duration_ms, attributes) VALUES "
                     f"('t', ?, '{S.CACHE_PREFIX_MATCH}', 1, 2.0, ?)", [span, f'{{"{N.PREFIX_FIRST_MISS_TOKEN}": {miss}}}'])
    rows = Query(conn).stage(S.CACHE_PREFIX_MATCH, {"miss": N.PREFIX_FIRST_MISS_TOKEN})
    assert sorted((r["span_id"], r["miss"]) for r in rows) == [("s1", None), ("s2", 40)]
    got = conn.execute(f"SELECT span_id, {attr(N.PREFIX_FIRST_MISS_TOKEN)} FROM spans ORDER BY 1").fetchall()
    assert got == [("s1", None), ("s2", 40)]
    dataset = conn.execute(f'SELECT span_id, "{N.PREFIX_FIRST_MISS_TOKEN}" FROM '
                           f"({stage_values_select(S.CACHE_PREFIX_MATCH)}) ORDER BY 1").fetchall()
    assert dataset == [("s1", None), ("s2", 40)]
