"""tracer/storage/dialect.py: each DuckDB construct the views and analyzers use gives the same value when the
transpiled statement runs inside ClickHouse (chdb) as when DuckDB runs the original."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("chdb")

from llmtrace.tracer.storage.clickhouse import ClickHouseConnection, connect  # noqa: E402
from llmtrace.tracer.storage.dialect import to_clickhouse  # noqa: E402

T = ("(SELECT * FROM (VALUES (1, 10, 'a', '{\"n\": 5, \"l\": [\"x\", \"y\"], \"s\": \"t\", \"f\": 1.5}'), "
     "(2, 20, 'b', '{\"n\": \"7\", \"b\": true}'), (3, NULL, 'a', '{}'), (4, 40, NULL, '{\"l\": []}')) "
     "AS t(k, v, g, j))")

CASES = [
    f"SELECT least(v, 15) AS a, greatest(NULL, v) AS b, v / 0 AS c, k // 2 AS d FROM {T} ORDER BY k",
    f"SELECT greatest(least(k * 1000, v * 1e2) - k, 0) / 1e3 AS mixed FROM {T} ORDER BY k",
    f"SELECT median(v) AS m, quantile_cont(v, 0.25) AS q, count(*) FILTER (WHERE v > 10) AS n, "
    f"sum(v) FILTER (WHERE v > 100) AS none FROM {T}",
    f"SELECT (list(k ORDER BY v DESC) FILTER (WHERE v IS NOT NULL))[1:2] AS top, mode(g) AS g, "
    f"histogram(g) FILTER (WHERE k < 4) AS h, bool_or(v > 30) AS any40 FROM {T}",
    f"SELECT json_extract_string(j, '$.\"n\"') AS n, json_extract_string(j, '$.\"l\"') AS l, "
    f"json_extract_string(j, '$.\"missing\"') AS m, json_extract_string(j, '$.\"l\"[*]') AS each, "
    f"json_type(CAST(json_extract(j, '$.l') AS JSON)) AS jt, TRY_CAST(json_extract_string(j, '$.\"b\"') AS BOOLEAN) AS b "
    f"FROM {T} ORDER BY k",
    "SELECT x.\"n\" AS n, x.\"f\" AS f, x.\"s\" AS s FROM (SELECT *, TRY(json_transform(j, "
    "'{\"n\": \"BIGINT\", \"f\": \"DOUBLE\", \"s\": \"VARCHAR\"}')) AS x FROM " + T + ") ORDER BY k",
    f"SELECT split_part(g || ':x:' || k, ':', 1) AS first, split_part(g || ':x:' || k, ':', -1) AS last, "
    f"split_part(g || '::' || k, '::', 2) AS multi, split_part(g, ':', 3) AS beyond FROM {T} ORDER BY k",
    f"SELECT g, sum(v) AS v, count(*) FILTER (WHERE v > 10) AS k FROM {T} GROUP BY g ORDER BY v DESC NULLS LAST, k, g",
    f"SELECT k, -v AS v FROM {T} ORDER BY v NULLS FIRST, k",
    f"SELECT coalesce(TRY_CAST(json_extract_string(j, '$.n') AS BIGINT), length(g)) AS n FROM {T} ORDER BY k",
    f"SELECT k, g FROM {T} WHERE k <= 2 UNION ALL BY NAME SELECT g, k FROM {T} WHERE k > 3 ORDER BY k",
    "WITH a AS (SELECT * FROM (VALUES (1, 100), (2, 250)) AS a(id, t)), "
    "b AS (SELECT * FROM (VALUES ('x', 90), ('y', 200)) AS b(name, t_end)) "
    "SELECT a.id, b.name FROM a ASOF LEFT JOIN b ON a.t >= b.t_end ORDER BY a.id",
]


@pytest.fixture(scope="module")
def ch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseConnection]:
    with connect(f"chdb://{tmp_path_factory.mktemp('dialect') / 'ch'}") as c:
        yield c


def _norm(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows]


@pytest.mark.parametrize("sql", CASES)
def test_same_values_in_both_engines(ch: ClickHouseConnection, sql: str) -> None:
    want = duckdb.connect().execute(sql).fetchall()
    got = ch.execute(sql).fetchall()
    assert _norm(got) == _norm(want), to_clickhouse(sql)


def test_parameters_are_bound_as_literals(ch: ClickHouseConnection, tmp_path: Path) -> None:
    sql = f"SELECT k FROM {T} WHERE g = ? AND k IN (SELECT unnest(?::BIGINT[])) ORDER BY k"
    params = ["a", [1, 3, 4]]
    assert ch.execute(sql, params).fetchall() == duckdb.connect().execute(sql, params).fetchall() == [(1,), (3,)]
    assert "?" not in to_clickhouse("SELECT '?' AS q, ? AS p", ["it's"])[0].replace("'?'", "")
