"""ClickHouse as a store: the analyzers' DuckDB SQL transpiled (tracer/storage/dialect.py) and run inside ClickHouse's
engine in-process (chdb), over the OpenTelemetry Collector exporter's ``otel_traces`` table filled from the same
spans as a DuckDB store, must give the same findings; and ``diagnose --store chdb://`` is the public face."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("chdb")  # in the dev extra; a checkout without it cannot run ClickHouse at all

from llmtrace.analyzers import run_analyzers  # noqa: E402
from llmtrace.cli import main  # noqa: E402
from llmtrace.tracer.storage.clickhouse import connect, ensure_views  # noqa: E402
from llmtrace.tracer.storage.store import read_connection  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from chdb_store import synthetic_pair  # noqa: E402
from synthetic_store import PLANTED  # noqa: E402

# The columns of the exporter's table (opentelemetry-collector-contrib clickhouseexporter traces_table.sql)
EXPORTER_COLUMNS = [
    ("Timestamp", "DateTime64(9)"), ("TraceId", "String"), ("SpanId", "String"), ("ParentSpanId", "String"),
    ("TraceState", "String"), ("SpanName", "LowCardinality(String)"), ("SpanKind", "LowCardinality(String)"),
    ("ServiceName", "LowCardinality(String)"), ("ResourceAttributes", "Map(LowCardinality(String), String)"),
    ("ScopeName", "String"), ("ScopeVersion", "String"), ("SpanAttributes", "Map(LowCardinality(String), String)"),
    ("Duration", "UInt64"), ("StatusCode", "LowCardinality(String)"), ("StatusMessage", "String"),
    ("Events.Timestamp", "Array(DateTime64(9))"), ("Events.Name", "Array(LowCardinality(String))"),
    ("Events.Attributes", "Array(Map(LowCardinality(String), String))"), ("Links.TraceId", "Array(String)"),
    ("Links.SpanId", "Array(String)"), ("Links.TraceState", "Array(String)"),
    ("Links.Attributes", "Array(Map(LowCardinality(String), String))"),
]


def _key(findings: list) -> list[tuple]:
    """What must be equal: symptom, stage, the words and every evidence number, how many traces are quoted.
    Which five traces are quoted may differ: several analyzers quote the first rows of a query without
    ORDER BY, and the two engines return rows in different orders (the ids are checked to be real)."""
    return sorted((f.symptom, f.stage, f.title, f.summary, len(f.trace_ids),
                   tuple((e.label, str(e.value), e.unit, str(e.baseline)) for e in f.evidence)) for f in findings)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db, folder = synthetic_pair(tmp_path_factory.mktemp("ch"), passes=300, seed=1)
    return db, f"chdb://{folder}"


def test_otel_traces_has_the_exporter_layout_and_the_spans_as_strings(stores: tuple[Path, str]) -> None:
    db, url = stores
    with connect(url) as ch:
        cols = [(r[0], r[1]) for r in ch.raw("DESCRIBE TABLE otel_traces").to_pylist() for r in [tuple(r.values())]]
        assert cols == EXPORTER_COLUMNS
        # the exporter's maps hold strings: a number, a list, a bool as the Collector writes them
        row = ch.execute("SELECT SpanAttributes['gen_ai.usage.input_tokens'], SpanAttributes['gen_ai.response.finish_reasons'], "
                         "SpanKind, StatusCode FROM otel_traces WHERE SpanAttributes['llmtrace.side'] = 'client' "
                         "ORDER BY Timestamp LIMIT 1").fetchone()
        assert row is not None and row[0].isdigit() and row[1].startswith("[") and row[2] == "Client" and row[3] == "Ok"
        n_ch = ch.execute("SELECT count(*) FROM spans").fetchone()[0]
    with read_connection(db) as conn:
        assert n_ch == conn.execute("SELECT count(*) FROM spans").fetchone()[0] == 300 * 40


def test_every_analyzer_on_clickhouse_finds_what_duckdb_finds(stores: tuple[Path, str]) -> None:
    db, url = stores
    with read_connection(db) as conn:
        duck = run_analyzers(conn)
    with connect(url) as ch:
        on_ch = run_analyzers(ch)
        passes_ch = ch.execute("SELECT count(*), sum(prompt_tokens), count(finish_reason) FROM passes").fetchone()
    with read_connection(db) as conn:
        passes_duck = conn.execute("SELECT count(*), sum(prompt_tokens), count(finish_reason) FROM passes").fetchone()
    assert passes_ch == passes_duck
    assert len(duck) >= 10  # the synthetic store's planted causes (not an empty comparison)
    assert _key(on_ch) == _key(duck)
    assert [(f.symptom, f.stage, f.title) for f in on_ch] == [(f.symptom, f.stage, f.title) for f in duck]
    with read_connection(db) as conn:
        known = {r[0] for r in conn.execute("SELECT DISTINCT trace_id FROM spans").fetchall()}
    assert {t for f in on_ch for t in f.trace_ids} <= known
    found = {(f.symptom, f.stage) for f in on_ch}
    assert sum((s, st) in found for s, st in PLANTED.items()) >= 10


def test_diagnose_with_store_url_and_env(stores: tuple[Path, str], capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db, url = stores
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    duck = json.loads(capsys.readouterr().out)["findings"]
    assert main(["diagnose", "--store", url, "--json"]) == 0
    ch = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["symptom"], f["stage"], f["title"], len(f["trace_ids"])) for f in ch] == \
        [(f["symptom"], f["stage"], f["title"], len(f["trace_ids"])) for f in duck]
    monkeypatch.setenv("LLMTRACE_STORE", url)
    assert main(["diagnose", "--symptom", "broken_json", "--json"]) == 0
    assert [f["symptom"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["broken_json"]


def test_bad_store_urls_are_clear_errors(stores: tuple[Path, str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["diagnose", "--store", f"chdb://{tmp_path / 'empty'}"]) == 1
    assert "no otel_traces table" in capsys.readouterr().err
    # LLMTRACE_STORE is the default only: an explicit --db wins
    monkeypatch.setenv("LLMTRACE_STORE", f"chdb://{tmp_path / 'empty'}")
    assert main(["diagnose", "--db", str(stores[0]), "--symptom", "broken_json", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"]
    assert main(["diagnose"]) == 1 and "no otel_traces table" in capsys.readouterr().err
    monkeypatch.delenv("LLMTRACE_STORE")
    with connect(f"chdb://{tmp_path / 'fresh'}") as ch:  # the exporter's table, no span in it yet
        ensure_views(ch, create_table=True)
    assert main(["diagnose", "--store", f"chdb://{tmp_path / 'fresh'}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    assert main(["diagnose", "--store", "clickhouse://127.0.0.1:9/db"]) == 1
    assert "ClickHouse" in capsys.readouterr().err


def test_sql_and_check_on_clickhouse_print_what_duckdb_prints(stores: tuple[Path, str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    db, url = stores
    query = "SELECT deploy, count(*) AS n, round(median(ttft_ms), 3) AS ttft FROM passes GROUP BY ALL ORDER BY deploy"
    outs = []
    for where in (["--db", str(db)], ["--store", url]):
        assert main(["sql", *where, "--json", query]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and len(outs[0]) >= 2
    assert main(["sql", "--store", url, "INSERT INTO deploys VALUES ('x', NULL, 1, NULL)"]) == 2  # read only
    capsys.readouterr()
    checks = []
    for where in (["--db", str(db)], ["--store", url]):
        code = main(["check", *where, "--baseline-deploy", "v1"])
        checks.append((code, capsys.readouterr().out))
    assert checks[0] == checks[1] and "against deploy v1" in checks[0][1]


@pytest.mark.parametrize("view,value", [("time_breakdown", "exclusive_ms"), ("ttft_breakdown", "ms"),
                                        ("traces", "duration_ms"), ("requests", "ttft_ms")])
def test_views_hold_the_same_numbers_on_both_engines(stores: tuple[Path, str], view: str, value: str) -> None:
    db, url = stores
    key = {"time_breakdown": "stage", "ttft_breakdown": "component"}.get(view, "1")
    sql = (f"SELECT {key} AS k, count(*) AS n, round(sum({value}), 3) AS total FROM {view} "
           f"GROUP BY ALL ORDER BY k")
    with read_connection(db) as conn:
        want = conn.execute(sql).fetchall()
    with connect(url) as ch:
        got = ch.execute(sql).fetchall()
    assert want and got == want
