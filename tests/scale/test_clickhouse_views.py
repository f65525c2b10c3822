"""Laying the read views on a ClickHouse store: the DuckDB view definitions are transpiled once per process
(each open of a store used to transpile every view again), and with the materialized tables the ``requests``
view is the one whose statement creates ``requests``, read off the parsed statement, not off its spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("chdb")

from llmtrace.tracer.storage import clickhouse  # noqa: E402
from llmtrace.tracer.storage.clickhouse import ClickHouseError, connect, ensure_views  # noqa: E402
from llmtrace.tracer.storage.views import views_sql  # noqa: E402


@pytest.fixture
def transpiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every DuckDB text clickhouse.py hands the transpiler."""
    seen: list[str] = []
    real = clickhouse.to_clickhouse

    def counted(sql: str, params: object = None) -> list[str]:
        seen.append(sql)
        return real(sql, params)  # type: ignore[arg-type]

    monkeypatch.setattr(clickhouse, "to_clickhouse", counted)
    return seen


def test_a_second_open_transpiles_no_view(tmp_path: Path, transpiles: list[str]) -> None:
    url = f"chdb://{tmp_path / 'ch'}"
    with connect(url) as ch:
        ensure_views(ch, create_table=True)
        view = ch.raw("SELECT create_table_query FROM system.tables WHERE database = currentDatabase() "
                      "AND name = 'requests'").column(0).to_pylist()[0]
        assert "llmtrace_requests" in view and "JSON" not in view.upper()  # the typed rows, no JSON parse
    transpiles.clear()  # (earlier tests of this process may have filled the cache, or not)
    for _ in range(2):
        with connect(url) as ch:
            ensure_views(ch)
            assert ch.execute("SELECT count(*) FROM passes").fetchone() == (0,)
    # the two opens laid every view again without transpiling one (the count query above is the only text)
    assert [s for s in transpiles if "CREATE" in s.upper()] == [], transpiles
    assert len(transpiles) == 2


def test_the_requests_view_is_found_by_what_it_creates(monkeypatch: pytest.MonkeyPatch) -> None:
    respelt = [s.replace("CREATE OR REPLACE VIEW requests AS", "create or replace view\n  requests as")
               for s in views_sql("spans", "deploys")]
    assert respelt != views_sql("spans", "deploys")
    monkeypatch.setattr(clickhouse, "views_sql", lambda *a: respelt)
    made = clickhouse.views()
    assert f"CREATE OR REPLACE VIEW requests AS SELECT * FROM {clickhouse.REQUESTS_TABLE}" in made
    assert sum(" VIEW requests " in s for s in made) == 1  # and the JSON-parsing one is not laid as well
    # a set of views without `requests` cannot be laid over the materialized tables: said, not half-made
    monkeypatch.setattr(clickhouse, "views_sql", lambda *a: [s for s in respelt if "requests as" not in s])
    with pytest.raises(ClickHouseError, match="one `requests` view"):
        clickhouse.views()
    # computed over otel_traces (no materialized tables), nothing is swapped: `requests` may be missing there
    assert len(clickhouse.views(materialized=False)) == len(respelt)  # the spans view + each one left
