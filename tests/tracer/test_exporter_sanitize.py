"""A value the store cannot take as it is (a lone surrogate, an int beyond 64 bits, a wrong type in a
column) is repaired in its own span; it never costs another span of the batch (issue 14 item 5)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import duckdb

import llmtrace
from llmtrace.tracer import health
from llmtrace.tracer import recording as rec


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_one_bad_span_among_concurrent_good_ones_costs_no_other_span(store_path: Path) -> None:
    llmtrace.init(db=store_path, service_name="svc")
    before = health.counters()
    threads, per_thread = 8, 40

    def good(t: int) -> None:
        for i in range(per_thread):
            with rec.start_pass("tiny", attributes={"thread": t}) as p, \
                    rec.stage("gen.stop", {"gen_ai.usage.output_tokens": i}, parent=p):
                pass

    def bad() -> None:
        # The shapes that failed a whole batch: a lone surrogate in the model (span name and attribute),
        # in a stage value, in a status message and an event; an int beyond 64 bits; a non-str operation.
        with rec.start_pass("tiny\ud800", attributes={"big": 2**70, "gen_ai.operation.name": 7}) as p:
            with rec.stage("gen.stop", {"gen_ai.response.finish_reasons": ["st\udc00op"]}, parent=p):
                pass
            p.otel_span.add_event("note\ud800", {"why": "x\udfff"})
            p.end("error", "bad \ud800 message")

    workers = [threading.Thread(target=good, args=(t,)) for t in range(threads)] + [threading.Thread(target=bad)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    llmtrace.shutdown()
    after = health.counters()
    assert after.get("dropped_spans", 0) == before.get("dropped_spans", 0)
    assert after.get("sanitized_values", 0) > before.get("sanitized_values", 0)  # counted, not silent
    assert rows(store_path, "SELECT count(*) FROM spans") == [(threads * per_thread * 2 + 2,)]
    name, status, message, attrs, events = rows(
        store_path, "SELECT name, status, status_message, attributes, events FROM spans WHERE name LIKE 'chat tiny_%'")[0]
    assert (name, status, message) == ("chat tiny\ufffd", "error", "bad \ufffd message")
    attrs = json.loads(attrs)
    assert attrs["gen_ai.request.model"] == "tiny\ufffd" and attrs["big"] == str(2**70)
    assert json.loads(events)[0]["name"] == "note\ufffd"
    stage_attrs = json.loads(rows(store_path, "SELECT attributes FROM spans WHERE stage = 'gen.stop' "
                                              "AND attributes LIKE '%finish_reasons%'")[0][0])
    assert stage_attrs["gen_ai.response.finish_reasons"] == ["st\ufffdop"]
    # The good spans are whole: every thread's passes and stages are there.
    got = rows(store_path, "SELECT json_extract_string(attributes, '$.thread') AS t, count(*) FROM spans "
                           "WHERE name = 'chat tiny' GROUP BY t ORDER BY t")
    assert got == [(str(t), per_thread) for t in range(threads)]


def test_valid_surrogate_pairs_and_plain_unicode_are_kept_as_they_are(store_path: Path) -> None:
    llmtrace.init(db=store_path)
    with rec.start_pass("m\U0001f600é", attributes={"emoji": "\U0001f600", "pair": "\ud83d\ude00"}):
        pass
    llmtrace.shutdown()
    name, attrs = rows(store_path, "SELECT name, attributes FROM spans")[0]
    assert name == "chat m\U0001f600é"
    assert json.loads(attrs)["emoji"] == "\U0001f600" and json.loads(attrs)["pair"] == "\U0001f600"
