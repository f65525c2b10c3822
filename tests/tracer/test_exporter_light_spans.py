"""Stage spans recorded on the light path (tracer/record/light_span.py) are the spans the SDK would have made:
the same rows in the store, the same ReadableSpans for any exporter, the sampler's decision kept."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import llmtrace
from llmtrace.tracer import recording as rec

COLUMNS = "name, kind, operation, stage, phase, service, deploy, status, status_message, attributes, resource"


def record_everything() -> str:
    """One pass with each kind of child span; returns the pass's span id."""
    with rec.start_pass("m", side="server") as p:
        with rec.stage("cache.prefix_match", {"llmtrace.prefix.hit_tokens": 96, "llmtrace.prefix.key": "k"},
                       parent=p) as s:
            s.set("llmtrace.prefix.first_miss_token", 97)
        with pytest.raises(KeyError), rec.stage("gen.stop", parent=p):
            raise KeyError("boom")
        t = rec.now_ns()
        rec.record_stage("forward.prefill", start_ns=t - 2_000_000, end_ns=t,
                         values={"llmtrace.prefill.tokens": 24}, parent=p)
        rec.record_stage("forward.decode", start_ns=t, end_ns=t, parent=p, status="cancelled")
        rec.mark_unobserved("gen.sampling", "hosted", parent=p)
        with rec.tool_span("lookup", "call_1", parent=p):
            with rec.stage("gen.stop"):  # no parent given: the current span (the tool) is the parent
                pass
    return p.span_id


def stored(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(f"SELECT {COLUMNS}, span_id, parent_span_id, trace_id, end_ns - start_ns FROM spans "
                          "ORDER BY name, stage").fetchall()
    finally:
        con.close()
    return got


def test_light_spans_store_the_rows_the_sdk_path_stores(tmp_path: Path) -> None:
    rows = {}
    for path in ("light", "sdk"):
        db = tmp_path / f"{path}.duckdb"
        llmtrace.init(db=db, service_name="svc", deploy="v1", strict=True)
        if path == "sdk":  # the same tracer without a sink: every span through Tracer.start_span
            rec.configure(rec._state["tracer"], strict=True)
        pass_id = record_everything()
        llmtrace.shutdown()
        rows[path] = (stored(db), pass_id)
    for got, pass_id in rows.values():
        by_name = {(r[0], r[3]): r for r in got}
        tool = by_name[("execute_tool lookup", "loop.tool_dispatch")]
        assert by_name[("gen.stop", "gen.stop")][12] in (pass_id, tool[11])  # parents are right on both paths
        assert len({r[13] for r in got}) == 1, "one trace"
        assert by_name[("forward.prefill", "forward.prefill")][14] == 2_000_000
    light, sdk = ([r[:11] for r in rows[p][0]] for p in ("light", "sdk"))
    assert light == sdk
    attrs = json.loads(next(r for r in rows["light"][0] if r[3] == "cache.prefix_match")[9])
    assert attrs["llmtrace.prefix.first_miss_token"] == 97 and attrs["llmtrace.prefix.hit_tokens"] == 96


def test_other_exporters_get_readable_spans_like_the_sdk_ones(store_path: Path) -> None:
    mem = InMemorySpanExporter()
    llmtrace.init(db=store_path, service_name="svc", exporters=[mem])
    with rec.start_pass("m") as p, rec.stage("gen.stop", {"gen_ai.usage.output_tokens": 3}, parent=p) as s:
        s.set("llmtrace.stop.matched", "eos")
    with rec.start_pass("m2") as p2, pytest.raises(ValueError), rec.tool_span("t", parent=p2):
        raise ValueError("bad")
    llmtrace.shutdown()
    spans = {s.name: s for s in mem.get_finished_spans()}
    stage, pass_span, tool = spans["gen.stop"], spans["chat m"], spans["execute_tool t"]
    assert stage.parent == pass_span.context and stage.context.trace_id == pass_span.context.trace_id
    assert stage.context.trace_flags.sampled and not stage.context.is_remote
    assert stage.resource.attributes["service.name"] == "svc"
    assert stage.instrumentation_scope is not None and stage.instrumentation_scope.name == "llmtrace"
    assert dict(stage.attributes)["gen_ai.usage.output_tokens"] == 3
    assert stage.kind is SpanKind.INTERNAL and stage.start_time <= stage.end_time
    # the error's message is the app's text (it may name what the call was asked): kept under capture="full"
    # only; the default (hashes) keeps its type
    assert tool.status.status_code is StatusCode.ERROR and tool.status.description == "ValueError"


def test_an_unsampled_pass_records_no_stage_span(store_path: Path) -> None:
    mem = InMemorySpanExporter()
    llmtrace.init(db=store_path, exporters=[mem])
    unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    with rec.start_pass("m", traceparent=unsampled) as p:
        with rec.stage("gen.stop", parent=p) as s:
            s.set("gen_ai.usage.output_tokens", 1)
        rec.record_stage("forward.decode", start_ns=1, end_ns=2, parent=p)
    llmtrace.shutdown()
    assert mem.get_finished_spans() == ()


def test_a_sampler_set_in_the_environment_keeps_the_sdk_path(store_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    mem = InMemorySpanExporter()
    llmtrace.init(db=store_path, exporters=[mem])
    assert rec._state["sink"] is None
    with rec.start_pass("m") as p, rec.stage("gen.stop", parent=p):
        pass
    llmtrace.shutdown()
    assert mem.get_finished_spans() == ()


def test_a_light_span_can_be_made_current_and_parent_an_sdk_span(store_path: Path) -> None:
    mem = InMemorySpanExporter()
    provider = llmtrace.init(db=store_path, exporters=[mem])
    other = provider.get_tracer("someone-else")
    with rec.start_pass("m") as p, rec.tool_span("search", parent=p) as tool:
        assert trace.get_current_span().get_span_context() == tool._span.get_span_context()
        with other.start_as_current_span("http GET"):
            pass
    llmtrace.shutdown()
    spans = {s.name: s for s in mem.get_finished_spans()}
    assert spans["http GET"].parent == spans["execute_tool search"].context
