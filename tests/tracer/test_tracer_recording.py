"""Recording API: passes, stages, after-the-fact stages, unobserved stages, tools, capture and privacy."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

import llmtrace
from llmtrace.tracer import capture, health
from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry.stages import UnknownStageError


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_pass_with_stages_lands_in_the_store(store_path: Path) -> None:
    llmtrace.init(db=store_path, service_name="svc", deploy="v7", strict=True)
    with rec.start_pass("smol", side="server") as p:
        p.set_many({"gen_ai.usage.input_tokens": 120, "gen_ai.usage.cache_read.input_tokens": 96,
                    "gen_ai.response.finish_reasons": ["stop"], "llmtrace.ttft_ms": 41.5})
        with rec.stage("cache.prefix_match", {"llmtrace.prefix.hit_tokens": 96}):
            pass
        t = rec.now_ns()
        rec.record_stage("forward.prefill", start_ns=t - 2_000_000, end_ns=t,
                         values={"llmtrace.prefill.tokens": 24, "llmtrace.prefill.ms": 2.0}, parent=p)
        rec.mark_unobserved("forward.decode", "hidden by the provider", parent=p)
        with rec.tool_span("lookup_account", "call_1", scope="read", parent=p):
            pass
    trace_id = p.trace_id
    llmtrace.shutdown()
    got = rows(store_path, "SELECT name, stage, phase, parent_span_id, service, deploy FROM spans ORDER BY start_ns")
    names = {r[0] for r in got}
    assert names == {"chat smol", "cache.prefix_match", "forward.prefill", "forward.decode", "execute_tool lookup_account"}
    assert all(r[4] == "svc" and r[5] == "v7" for r in got)
    children = [r for r in got if r[0] != "chat smol"]
    assert {r[3] for r in children} == {p.span_id}
    req = rows(store_path, "SELECT trace_id, prompt_tokens, cached_tokens, hit_ratio, ttft_ms, finish_reason, deploy FROM requests")
    assert req == [(trace_id, 120, 96, 0.8, 41.5, "stop", "v7")]
    dur = rows(store_path, "SELECT duration_ms FROM stages WHERE stage = 'forward.prefill'")[0][0]
    assert dur == pytest.approx(2.0, abs=0.01)
    unobs = rows(store_path, "SELECT json_extract_string(attributes, '$.\"llmtrace.observed\"') FROM spans WHERE stage='forward.decode'")
    assert unobs == [("false",)]
    tool = rows(store_path, "SELECT operation, stage FROM spans WHERE name LIKE 'execute_tool%'")
    assert tool == [("execute_tool", "loop.tool_dispatch")]


def test_wrong_value_type_is_dropped_and_counted_when_not_strict(store_path: Path) -> None:
    llmtrace.init(db=store_path, strict=False)
    before = health.counters().get("wrong_value_type", 0)
    undeclared = health.counters().get("undeclared_value", 0)
    with rec.start_pass("m") as p, rec.stage("cache.prefix_match", {"llmtrace.prefix.hit_tokens": "lots"}, parent=p) as s:
        s.set("llmtrace.prefix.first_miss_token", 3.5)  # int expected
        s.set("llmtrace.prefix.key", "abc")
        s.set("llmtrace.prefix.made_up", 1)  # undeclared: kept (nothing is lost) and counted
    llmtrace.shutdown()
    assert health.counters()["wrong_value_type"] == before + 2
    assert health.counters()["undeclared_value"] == undeclared + 1
    attrs = json.loads(rows(store_path, "SELECT attributes FROM spans WHERE stage IS NOT NULL")[0][0])
    assert "llmtrace.prefix.hit_tokens" not in attrs and attrs["llmtrace.prefix.key"] == "abc"
    assert attrs["llmtrace.prefix.made_up"] == 1


def test_strict_mode_fails_on_a_wrong_type_or_an_undeclared_name(store_path: Path) -> None:
    llmtrace.init(db=store_path, strict=True)
    try:
        with rec.start_pass("m") as p:
            with pytest.raises(rec.UndeclaredValueError, match="is not int"):
                rec.record_stage("cache.prefix_match", start_ns=1, end_ns=2, parent=p,
                                 values={"llmtrace.prefix.hit_tokens": "lots"})
            with pytest.raises(rec.UndeclaredValueError, match="not declared"):
                rec.record_stage("cache.prefix_match", start_ns=1, end_ns=2, parent=p,
                                 values={"llmtrace.prefix.made_up": 1})
            with pytest.raises(rec.UndeclaredValueError, match="pass span: llmtrace.made_up"):
                p.set("llmtrace.made_up", 1)
            p.set("app.own_value", 1)  # outside llmtrace's namespaces: the app's own, never checked
    finally:
        llmtrace.shutdown()


def test_unknown_stage_raises_in_strict_mode_and_is_counted_otherwise(store_path: Path) -> None:
    llmtrace.init(db=store_path, strict=True)
    with pytest.raises(UnknownStageError), rec.stage("cache.nope"):
        pass
    llmtrace.init(db=store_path, strict=False)
    before = health.counters().get("unknown_stage", 0)
    with rec.stage("cache.nope"):
        pass
    llmtrace.shutdown()
    assert health.counters()["unknown_stage"] == before + 1


def test_exception_in_a_pass_is_recorded_and_propagates(store_path: Path) -> None:
    llmtrace.init(db=store_path)
    with pytest.raises(ZeroDivisionError), rec.start_pass("m"):
        1 / 0  # noqa: B018
    llmtrace.shutdown()
    assert rows(store_path, "SELECT status, status_message FROM spans") == [("error", "ZeroDivisionError: division by zero")]


def test_traceparent_makes_a_child_of_the_remote_span(store_path: Path) -> None:
    llmtrace.init(db=store_path)
    client = rec.start_pass("m", side="client")
    server = rec.start_pass("m", side="server", traceparent=client.traceparent())
    server.end()
    client.end()
    llmtrace.shutdown()
    got = dict(rows(store_path, "SELECT json_extract_string(attributes, '$.\"llmtrace.side\"'), parent_span_id FROM spans"))
    assert got["server"] == client.span_id and server.trace_id == client.trace_id


def test_short_script_loses_no_span_without_calling_shutdown(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    script = textwrap.dedent(f"""
        import llmtrace
        from llmtrace.tracer import recording as rec
        llmtrace.init(db={str(db)!r})
        for i in range(500):
            with rec.start_pass("m") as p, rec.stage("gen.stop", {{"gen_ai.usage.output_tokens": i}}, parent=p):
                pass
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    assert rows(db, "SELECT count(*) FROM spans") == [(1000,)]


def test_capture_scrubs_secrets_and_chains_hashes() -> None:
    text = "use key sk-proj-abcdefghijklmnopqrstuvwx and Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop"
    cleaned = capture.scrub(text)
    assert "sk-proj" not in cleaned and "eyJ" not in cleaned and len(capture.REDACTED_MARKER.findall(cleaned)) == 2
    a = capture.chunk_hash_chain("x" * 200 + "2026-11-29T10:00", chunk_chars=64)
    b = capture.chunk_hash_chain("x" * 200 + "2026-11-30T10:00", chunk_chars=64)
    assert capture.first_divergence(a, b) == 3 and len(a) == 4
    c = capture.chunk_hash_chain("y" + "x" * 199 + "2026-11-29T10:00", chunk_chars=64)
    assert capture.first_divergence(a, c) == 0  # a change early breaks every later chunk, like KV blocks
    # a secret's marker is a keyed hash of it: one key sent on every call is one marker (a stable prefix), a
    # token minted per call is a marker that changes (the cache analysis sees the prompts part there)
    key = "sk-proj-abcdefghijklmnopqrstuvwx"
    assert capture.scrub(key) == capture.scrub(key) != capture.scrub("sk-proj-zzzzzzzzzzzzzzzzzzzzzzzz")
    assert capture.hash_text(key) != capture.hash_text("sk-proj-zzzzzzzzzzzzzzzzzzzzzzzz")
    assert capture.scrub(capture.scrub(key)) == capture.scrub(key)  # scrubbing twice changes nothing


def test_capture_modes(store_path: Path) -> None:
    llmtrace.init(db=store_path, capture="none")
    assert capture.keep_text("hello") is None
    llmtrace.init(db=store_path, capture="full")
    kept = capture.keep_text("token sk-ant-abcdefghijklmnopqrstu")
    assert kept is not None and capture.REDACTED_MARKER.fullmatch(kept.removeprefix("token "))
    with pytest.raises(ValueError, match="capture must be one of"):
        llmtrace.init(db=store_path, capture="everything")
    llmtrace.init(db=store_path)
    assert capture.mode() == "hashes"
    llmtrace.shutdown()


def test_otlp_endpoint_down_never_raises(store_path: Path) -> None:
    from testkit import free_port

    llmtrace.init(db=store_path, otlp_endpoint=f"http://127.0.0.1:{free_port()}")
    for _ in range(10):
        with rec.start_pass("m") as p, rec.stage("gen.stop", parent=p):
            pass
    llmtrace.shutdown()  # the OTLP exporter fails to connect: logged by the SDK, never raised
    assert rows(store_path, "SELECT count(*) FROM spans") == [(20,)]
