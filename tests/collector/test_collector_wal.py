"""The write-ahead log left by a collector that died: replayed once, torn or undecodable records skipped,
and a log never keeps the next collector from starting."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from collector_helpers import count_spans, query, start_collector
from test_collector_bad_input import _request

CRASHER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from llmtrace.tracer.collect.wal import WriteAheadLog
    wal = WriteAheadLog(Path(sys.argv[1]))
    wal.open()
    for path in sys.argv[2:]:
        body = Path(path).read_bytes()
        wal.sync(wal.append(body, "application/x-protobuf", None))
    os._exit(0)  # died with everything logged and nothing committed (as kill -9 would leave it)
""")


def test_a_dead_collectors_log_is_replayed_once_and_bad_records_skipped(tmp_path: Path) -> None:
    db = tmp_path / "collected.duckdb"
    wal_dir = tmp_path / "collected.duckdb.collect-wal"
    bodies = []
    for i, data in enumerate([_request(10, seed=1).SerializeToString(), b"\x0a\xff\xff not protobuf",
                              _request(10, seed=1).SerializeToString(),  # the same spans again: stored once
                              _request(5, seed=2).SerializeToString()]):
        f = tmp_path / f"body{i}"
        f.write_bytes(data)
        bodies.append(str(f))
    (tmp_path / "crash.py").write_text(CRASHER)
    subprocess.run([sys.executable, str(tmp_path / "crash.py"), str(wal_dir), *bodies], check=True, timeout=60)
    (seg,) = wal_dir.glob("*.wal")
    with seg.open("ab") as f:
        f.write(b"LTW1\x05\x00\x00\x00\xff\xff\x00\x00")  # a torn record at the tail: never acknowledged
    col = start_collector(tmp_path)
    try:
        log = col.log()
        assert "replayed 15 spans" in log and "10 were already stored" in log, log
        assert not seg.exists() and not list(wal_dir.glob("*.bad"))  # replayed, then gone
    finally:
        assert col.stop() == 0
    assert count_spans(db) == 15
    assert query(db, "SELECT count(DISTINCT span_id) FROM spans") == [(15,)]
    # a second start finds nothing to replay
    col = start_collector(tmp_path, name="again")
    try:
        assert "replayed" not in col.log()
    finally:
        assert col.stop() == 0
    assert count_spans(db) == 15
