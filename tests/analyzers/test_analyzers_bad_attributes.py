"""Spans whose attributes are not JSON (a Parquet file written by another tool: the column is plain text)
read as spans without values; `diagnose --parquet` still answers, it does not stop on a parse error.

A store's own spans table needs no such guard (its JSON column validates every document on write), so the
analyzers drop it there for speed: this holds them to keeping it wherever the column is not that table's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb

from llmtrace.tracer.storage.views import SPAN_COLUMNS


def _spans_parquet(path: Path) -> None:
    conn = duckdb.connect()
    cols = ", ".join(f"{n} {'VARCHAR' if t == 'JSON' else t}" for n, t in SPAN_COLUMNS)
    conn.execute(f"CREATE TABLE spans ({cols})")
    rows = []
    for i in range(12):
        attrs = json.dumps({"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 300,
                            "gen_ai.usage.cache_read.input_tokens": 0, "gen_ai.request.model": "m",
                            "gen_ai.response.finish_reasons": ["stop"]})
        if i % 3 == 0:
            attrs = '{"gen_ai.usage.input_tokens": 3'  # cut off: not JSON
        rows.append((f"{i:032x}", f"{i:016x}", None, "chat m", "client", "chat", None, None, "app", "v1",
                     1_700_000_000_000_000_000 + i * 10**9, 1_700_000_000_500_000_000 + i * 10**9, 500.0, "ok", None,
                     attrs, "{}", "[]"))
    conn.executemany(f"INSERT INTO spans VALUES ({', '.join('?' * len(SPAN_COLUMNS))})", rows)
    conn.execute(f"COPY spans TO '{path}' (FORMAT parquet)")


def test_diagnose_reads_a_parquet_file_whose_attributes_are_not_all_json(tmp_path: Path) -> None:
    file = tmp_path / "spans.parquet"
    _spans_parquet(file)
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "diagnose", "--parquet", str(file), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert isinstance(json.loads(out.stdout), (dict, list))
