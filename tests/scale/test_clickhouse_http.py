"""The HTTP path (``clickhouse://HOST:8123/DB``, clickhouse-connect) sends the SQL the in-process path (``chdb://``)
runs: one ClickHouseConnection builds every statement, two senders differ only in how it travels. Tested through
the real clickhouse-connect client against a loopback endpoint backed by chdb (tests/scale/chdb_http.py: not a
ClickHouse server, none is installable here)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("chdb")
pytest.importorskip("clickhouse_connect")

from llmtrace.analyzers import run_analyzers  # noqa: E402
from llmtrace.cli import main  # noqa: E402
from llmtrace.tracer.storage.clickhouse import (  # noqa: E402
    ClickHouseConnection,
    connect,
    ensure_views,  # noqa: E402
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from chdb_http import ChdbHTTP  # noqa: E402
from chdb_store import synthetic_pair  # noqa: E402


@pytest.fixture(scope="module")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_pair(tmp_path_factory.mktemp("chh"), passes=100, seed=4)[1]


def _recorded(conn: ClickHouseConnection) -> list[str]:
    sent: list[str] = []
    send = conn._send
    conn._send = lambda sql: (sent.append(sql), send(sql))[1]  # what this sender is handed
    return sent


def _same(sql: str) -> str:
    # a run's temporary table names carry an object id (analyzers/core/query.py): the only difference allowed
    return re.sub(r"(_llmtrace_[a-z_]+?_)[0-9a-f]{6,}", r"\1ID", sql)


def test_http_sender_sends_what_chdb_runs(chdb_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with connect(f"chdb://{chdb_path}") as ch:
        on_chdb = _recorded(ch)
        ensure_views(ch)
        want = run_analyzers(ch)
    server = ChdbHTTP(str(chdb_path))
    with server as port:
        url = f"clickhouse://127.0.0.1:{port}/llmtrace"
        with connect(url) as http:
            over_http = _recorded(http)
            ensure_views(http)
            got = run_analyzers(http)
        assert main(["diagnose", "--store", url, "--json"]) == 0
        got_cli = json.loads(capsys.readouterr().out)["findings"]
        assert main(["sql", "--store", url, "--json", "SELECT count(*) AS n FROM passes"]) == 0
        assert json.loads(capsys.readouterr().out) == [{"n": 100}]
    assert len(on_chdb) > 40 and [_same(s) for s in over_http] == [_same(s) for s in on_chdb]
    # and the endpoint received exactly those statements (besides the client's own start-up queries)
    received = [s for s in server.queries if not s.startswith(("SELECT version()", "SELECT name, value, readonly",
                                                               "SELECT 1 AS check"))]
    assert [_same(s) for s in received[: len(over_http)]] == [_same(s.strip()) for s in over_http]
    assert [(f.symptom, f.stage, f.title, f.summary) for f in got] == \
        [(f.symptom, f.stage, f.title, f.summary) for f in want] and len(want) >= 8
    assert [(f["symptom"], f["stage"], f["title"]) for f in got_cli] == [(f.symptom, f.stage, f.title) for f in want]
