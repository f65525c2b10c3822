"""`llmtrace sql`, `llmtrace deploy mark`, and every example query of docs/sql.md, on a real store."""

from __future__ import annotations

import concurrent.futures as cf
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import llmtrace
from llmtrace.tracer import recording as rec

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtrace.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def filled_store(store_path: Path) -> Path:
    for deploy, hit in (("v1", 96), ("v2", 0)):
        llmtrace.init(db=store_path, deploy=deploy, service_name="app")
        for i in range(3):
            with rec.start_pass("smol") as p:
                p.set_many({"gen_ai.usage.input_tokens": 128, "gen_ai.usage.cache_read.input_tokens": hit,
                            "llmtrace.ttft_ms": 20.0 + i + (100 if hit == 0 else 0),
                            "gen_ai.response.finish_reasons": ["length" if i == 0 else "stop"]})
                with rec.stage("cache.prefix_match", {"llmtrace.prefix.hit_tokens": hit}, parent=p):
                    pass
                with rec.stage("forward.prefill", {"llmtrace.prefill.tokens": 128 - hit}, parent=p):
                    pass
        llmtrace.shutdown()
    return store_path


def test_every_docs_sql_example_runs(filled_store: Path) -> None:
    queries = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "sql.md").read_text(), re.S)
    assert len(queries) >= 8
    # four read-only processes at a time: they share the store's read lock (one by one, ten of them took ~40 s
    # of a loaded 2-core box)
    with cf.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda q: cli("sql", q, "--db", str(filled_store), "--json"), queries))
    for q, r in zip(queries, runs, strict=True):
        assert r.returncode == 0, (q, r.stderr)
        json.loads(r.stdout)
    by_deploy = json.loads(runs[1].stdout)
    assert [(d["deploy"], d["hit_rate"]) for d in by_deploy] == [("v1", 0.75), ("v2", 0.0)]


def test_sql_formats_and_read_only(filled_store: Path) -> None:
    db = str(filled_store)
    writes = ("DELETE FROM spans", "drop view requests", "  insert into deploys values ('x', null, 1, null)")
    argvs = [("sql", "SELECT deploy, count(*) AS n FROM requests GROUP BY deploy ORDER BY deploy", "--db", db),
             ("sql", "SELECT deploy FROM requests ORDER BY deploy LIMIT 1", "--db", db, "--csv"),
             ("sql", "SELEC 1", "--db", db), ("sql", "SELECT 1", "--db", str(filled_store.parent / "missing.duckdb")),
             *(("sql", stmt, "--db", db) for stmt in writes)]
    with cf.ThreadPoolExecutor(4) as pool:  # each a process of its own, as in test_every_docs_sql_example_runs
        table, csv, bad, missing, *refused = pool.map(lambda argv: cli(*argv), argvs)
    # piped: plain tab-separated text, header first (the box is for terminals, tests/tracer/test_sql_output.py)
    assert table.returncode == 0 and table.stdout.splitlines() == ["deploy\tn", "v1\t3", "v2\t3"]
    assert csv.stdout.splitlines() == ["deploy", "v1"]
    for r in refused:
        assert r.returncode == 2 and "only read queries" in r.stderr
    assert bad.returncode == 2 and "syntax error" in bad.stderr.lower() and "Traceback" not in bad.stderr
    assert missing.returncode == 1 and "no store at" in missing.stderr


def test_deploy_mark(filled_store: Path) -> None:
    r = cli("deploy", "mark", "v3", "--note", "moved the timestamp", "--db", str(filled_store))
    assert r.returncode == 0, r.stderr
    rows = json.loads(cli("sql", "SELECT name, note FROM deploys", "--db", str(filled_store), "--json").stdout)
    assert rows == [{"name": "v3", "note": "moved the timestamp"}]


def test_unknown_command_and_help() -> None:
    r = cli("frobnicate")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    assert "diagnose" in cli("--help").stdout
