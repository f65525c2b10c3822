"""`llmtrace sql --service NAME --since WHEN`: every view (spans, stages, requests, traces, deploys) shows only
that service and window, on the store and on a Parquet export; bad --since values are a usage error."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import llmtrace
from llmtrace.cli import main
from llmtrace.tracer import recording as rec
from llmtrace.tracer.cli.timewindow import parse_since
from llmtrace.tracer.storage.store import mark_deploy, write_connection

DAY_NS = 86_400 * 1_000_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sqlfilter") / "traces.duckdb"
    for service, passes in (("alpha", 2), ("beta", 3)):
        llmtrace.init(db=db, service_name=service, deploy="v1")
        for _ in range(passes):
            with rec.start_pass("smol") as p:
                p.set_many({"gen_ai.usage.input_tokens": 10})
                with rec.stage("cache.prefix_match", {"llmtrace.prefix.hit_tokens": 0}, parent=p):
                    pass
        llmtrace.shutdown()
    # A copy of alpha's traces ten days older: what --since must leave out.
    with write_connection(db) as conn:
        conn.execute(f"""INSERT INTO spans SELECT * REPLACE ('old' || substr(trace_id, 4) AS trace_id,
                         start_ns - {10 * DAY_NS} AS start_ns, end_ns - {10 * DAY_NS} AS end_ns)
                         FROM spans WHERE service = 'alpha'""")
    mark_deploy(db, "alpha-v2", service="alpha")
    mark_deploy(db, "beta-v2", service="beta")
    mark_deploy(db, "all-v3")
    return db


def rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    rc = main(["sql", "--json", *args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_service_limits_every_view(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(store)]
    everything = rows(capsys, *db, "SELECT service, count(*) AS n FROM requests GROUP BY ALL ORDER BY 1")
    assert everything == [{"service": "alpha", "n": 4}, {"service": "beta", "n": 3}]
    q = ("SELECT (SELECT count(*) FROM spans) AS spans, (SELECT count(*) FROM stages) AS stages, "
         "(SELECT count(*) FROM requests) AS requests, (SELECT count(*) FROM traces) AS traces, "
         "(SELECT string_agg(DISTINCT service) FROM spans) AS services, "
         "(SELECT string_agg(name, ',' ORDER BY name) FROM deploys) AS deploys")
    assert rows(capsys, *db, "--service", "beta", q) == [
        {"spans": 6, "stages": 3, "requests": 3, "traces": 3, "services": "beta", "deploys": "all-v3,beta-v2"}]
    assert rows(capsys, *db, "--service", "nobody", "SELECT count(*) AS n FROM traces") == [{"n": 0}]


def test_since_limits_the_window(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(store)]
    q = "SELECT count(*) AS n, count(DISTINCT trace_id) AS traces FROM requests"
    assert rows(capsys, *db, "--since", "7d", q) == [{"n": 5, "traces": 5}]
    assert rows(capsys, *db, "--since", "30d", q) == [{"n": 7, "traces": 7}]
    assert rows(capsys, *db, "--since", "7d", "--service", "alpha", q) == [{"n": 2, "traces": 2}]
    eleven_days_ago = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 11 * 86400))
    assert rows(capsys, *db, "--since", eleven_days_ago, q) == [{"n": 7, "traces": 7}]
    assert rows(capsys, *db, "--since", "1h30m", "SELECT count(*) AS n FROM traces") == [{"n": 5}]


def test_filters_on_a_parquet_export(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--db", str(store), "--parquet", str(tmp_path / "pq")]) == 0
    capsys.readouterr()
    pq = ["--parquet", str(tmp_path / "pq" / "**" / "*.parquet")]
    assert rows(capsys, *pq, "--service", "alpha", "--since", "7d", "SELECT count(*) AS n FROM requests") == [{"n": 2}]
    assert rows(capsys, *pq, "--service", "beta", "SELECT count(*) AS n FROM stages") == [{"n": 3}]


def test_filters_keep_the_read_only_rules(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sql", "--db", str(store), "--service", "alpha", "DELETE FROM spans"])
    assert rc == 2 and "refused" in capsys.readouterr().err
    assert rows(capsys, "--db", str(store), "SELECT count(*) AS n FROM spans") == [{"n": 14}]


def test_bad_since_is_a_usage_error(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sql", "--db", str(store), "--since", "yesterday-ish", "SELECT 1"])
    assert exc.value.code == 2 and "cannot read --since 'yesterday-ish'" in capsys.readouterr().err


def test_parse_since() -> None:
    now = 1_800_000_000 * 10**9
    assert parse_since("30m", now) == now - 30 * 60 * 10**9
    assert parse_since("1h30m", now) == now - 90 * 60 * 10**9
    assert parse_since("7d", now) == now - 7 * DAY_NS
    assert parse_since("2026-11-30") == 1_795_996_800 * 10**9
    assert parse_since("2026-11-30T10:00+01:00") == parse_since("2026-11-30T09:00Z")
    for bad in ("", "soon", "7x", "-1d"):
        with pytest.raises(ValueError, match="cannot read --since"):
            parse_since(bad, now)
