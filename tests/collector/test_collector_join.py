"""Client and engine spans joined into one trace by response id where no traceparent reached the engine
(tracer/collect/otlp_join.py), through the stock OTLP/HTTP exporter into a real ``llmtrace collect`` process.

Each side in its own process's names, never a traceparent between them (each engine span is a root of a
trace of its own, as when Dynamo's KV router or a gateway drops the context):

- the app: OTel GenAI client spans (opentelemetry-instrumentation-openai-v2's names), ``gen_ai.response.id`` =
  the id the OpenAI-compatible server answered with;
- vLLM V1: ``llm_request`` with ``gen_ai.request.id`` (vllm/v1/engine/output_processor.py do_tracing: the
  external request id, ``chatcmpl-<base>``, the same string its OpenAI server returns as the response id),
  ``gen_ai.latency.*`` in ns and the lifecycle child spans of vllm-project/vllm PR 44402 (``vllm_queue``,
  ``vllm_prefill``, ``vllm_decode``);
- SGLang: the four-level request trace of sglang/srt/tracing/trace.py (docs/references/
  production_request_trace.md): ``Bootstrap Room 0x0`` -> `` Req <rid[:8]>`` (``rid``, ``<worker>_<rid>``
  under several tokenizer workers; ``gen_ai.latency.*`` in s set at finish) -> a thread span; its OpenAI
  server's response id is the rid itself;
- Dynamo: ``router.route_request`` (lib/runtime/src/pipeline/network/egress/push_router.rs: ``request_id``,
  ``worker_id``) -> ``engine.generate`` (tests/frontend/test_unified_worker_otlp_export.py, PR 9543) with the
  frontend's ``request_id`` (a field of Dynamo's route and ``http-request`` spans; on ``engine.generate`` it
  is this test's assumption, not seen in Dynamo's source); in KV mode ``kv_router.find_matches`` and
  ``kv_router.route_request`` (lib/llm/src/kv_router) under the frontend's ``http-request``.

Half the calls send the engine's spans first, half the client's, and one engine child span arrives after
its request was joined: the join must not depend on the order. Then the pair is one trace in the store,
in the ``passes`` view, in the explorer's and the report's waterfalls (marked joined by response id), and
``llmtrace diagnose`` over the store names the vLLM queue with the app's trace ids.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from collector_helpers import diagnose_services, otlp_provider, query, start_collector
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

T0 = 1_780_000_000_000_000_000
MS = 1_000_000
N_VLLM = 8


def _client(app: TracerProvider, start: int, response_id: str, end: int, cached: int | None = None) -> Any:
    t = app.get_tracer("opentelemetry.instrumentation.openai_v2")
    s = t.start_span("chat llama", kind=SpanKind.CLIENT, start_time=start, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "llama",
        "gen_ai.response.model": "llama", "gen_ai.response.id": response_id, "gen_ai.usage.input_tokens": 300,
        "gen_ai.usage.output_tokens": 30, "gen_ai.response.finish_reasons": ["stop"],
        "server.address": "llm.internal"})
    if cached is not None:
        s.set_attributes({"gen_ai.usage.input_tokens": 2048, "gen_ai.usage.cache_read.input_tokens": cached})
    s.end(end_time=end)
    return s


def _vllm(eng: TracerProvider, start: int, request_id: str, queued: bool) -> Any:
    t = eng.get_tracer("vllm.llm_engine")
    q = 1500 if queued else 0
    root = t.start_span("llm_request", kind=SpanKind.SERVER, start_time=start, attributes={
        "gen_ai.request.id": request_id, "gen_ai.response.model": "llama", "gen_ai.usage.prompt_tokens": 300,
        "gen_ai.usage.completion_tokens": 30, "gen_ai.latency.time_in_queue": q * MS,
        "gen_ai.latency.time_to_first_token": (q + 300) * MS, "gen_ai.latency.time_in_model_prefill": 280 * MS,
        "gen_ai.latency.time_in_model_decode": 600 * MS, "gen_ai.latency.e2e": (q + 900) * MS})
    ctx = trace.set_span_in_context(root)
    for name, a, b in (("vllm_queue", 0, q), ("vllm_prefill", q, q + 280)):
        t.start_span(name, context=ctx, start_time=start + a * MS).end(end_time=start + b * MS)
    root.end(end_time=start + (q + 900) * MS)
    return root


def _sglang(eng: TracerProvider, start: int, rid: str) -> Any:
    t = eng.get_tracer("sglang server")
    room = t.start_span("Bootstrap Room 0x0", start_time=start, attributes={"bootstrap_room": "0x0"})
    req = t.start_span(f" Req {rid[:8]}", context=trace.set_span_in_context(room), start_time=start,
                       attributes={"rid": f"1_{rid}"})
    thread = t.start_span("scheduler [TP 0] (host:5e1f0c2a | pid:4242)", context=trace.set_span_in_context(req),
                          start_time=start + MS, attributes={"host_id": "5e1f0c2a", "pid": 4242,
                                                             "thread_label": "scheduler", "tp_rank": 0})
    thread.end(end_time=start + 700 * MS)
    req.set_attributes({"gen_ai.latency.time_to_first_token": 0.2, "gen_ai.latency.e2e": 0.7,
                        "gen_ai.latency.time_in_model_prefill": 0.18, "gen_ai.latency.time_in_model_decode": 0.5,
                        "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 30})
    req.end(end_time=start + 700 * MS)
    room.end(end_time=start + 700 * MS)
    return req


def _dynamo(eng: TracerProvider, start: int, request_id: str) -> Any:
    t = eng.get_tracer("dynamo.worker")
    route = t.start_span("router.route_request", start_time=start, attributes={"worker_id": "w0"})
    gen = t.start_span("engine.generate", context=trace.set_span_in_context(route), start_time=start + MS,
                       attributes={"request_id": request_id, "disagg_role": "decode", "model": "llama",
                                   "input_tokens": 300, "ttft_ms": 80.0, "output_tokens": 30, "finish_reason": "stop"})
    gen.end(end_time=start + 600 * MS)
    route.end(end_time=start + 601 * MS)
    return gen


def _hex(ctx: Any) -> tuple[str, str]:
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _engine(kind: str, tp: TracerProvider, start: int, rid: str, i: int) -> Any:
    if kind == "vllm":
        return _vllm(tp, start, rid, queued=i % 4 != 0)  # 6 of 8 held 1.5 s in vLLM's queue
    return _sglang(tp, start, rid) if kind == "sglang" else _dynamo(tp, start, rid)


def _send_calls(app: TracerProvider, engines: dict[str, TracerProvider]) -> list[dict[str, Any]]:
    """Every call's two sides, the engine's first for half of them, the client's first for the others (each
    side flushed before the other is made), and a vLLM decode span for two requests after they were joined."""
    plan: list[tuple[str, int, str]] = [("vllm", i, f"{i:08x}c0ffee5e1d") for i in range(N_VLLM)]
    plan += [("sglang", 0, "7f3a1b2c9d8e4f60a1b2c3d4e5f60718"), ("dynamo", 0, "3b1f-9c2e-dyn")]
    calls: list[dict[str, Any]] = []
    for first_engine in (True, False):
        for k, (kind, i, base) in enumerate(plan):
            if (k % 2 == 0) != first_engine:
                continue
            start = T0 + k * 3000 * MS
            rid = f"chatcmpl-{base}" if kind == "vllm" else base  # vLLM's ids carry the OpenAI prefix, SGLang's not
            call: dict[str, Any] = {"kind": kind, "rid": rid, "late": kind == "vllm" and i in (0, 1)}
            for side in (("engine", "client") if first_engine else ("client", "engine")):
                if side == "engine":
                    call["engine"] = _engine(kind, engines[kind], start + MS, rid, i)
                    engines[kind].force_flush()
                else:
                    call["client"] = _client(app, start, rid, start + 2600 * MS)
                    app.force_flush()
            calls.append(call)
    for call in calls:  # exported after its request was joined: it follows its trace
        if call["late"]:
            root = call["engine"]
            engines["vllm"].get_tracer("vllm.llm_engine").start_span(
                "vllm_decode", context=trace.set_span_in_context(root), start_time=root.start_time + 1800 * MS
            ).end(end_time=root.end_time)
    return calls


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("join")
    col = start_collector(tmp)
    try:
        app = otlp_provider(col.endpoint, "returns-app")
        engines = {"vllm": otlp_provider(col.endpoint, "vllm", **{"k8s.pod.name": "vllm-0"}),
                   "sglang": otlp_provider(col.endpoint, "sglang"), "dynamo": otlp_provider(col.endpoint, "dynamo")}
        calls = _send_calls(app, engines)
        # a client call no engine names, and an engine request no client names: both stay as they are
        lonely = _client(app, T0 - 10_000 * MS, "chatcmpl-nobody-answered", T0 - 9000 * MS)
        orphan = _vllm(engines["vllm"], T0 - 8000 * MS, "chatcmpl-nobody-asked", queued=False)
        for tp in (app, *engines.values()):
            tp.shutdown()
        # vLLM 8 x (3 spans + 1 row) + 2 late + orphan 4; SGLang 3 spans + 3 rows; Dynamo 2; clients 11
        col.wait_written(8 * 4 + 2 + 4 + 6 + 2 + 11, timeout_s=60)
        stats = col.stats()
    finally:
        assert col.stop() == 0, col.log()
    return {"db": col.db, "calls": calls, "lonely": lonely, "orphan": orphan, "stats": stats, "tmp": tmp}


def test_each_engine_trace_is_under_its_client_call(joined: dict[str, Any]) -> None:
    db = joined["db"]
    assert joined["stats"]["traces_joined_by_response_id"] == len(joined["calls"]), joined["stats"]
    for call in joined["calls"]:
        c_trace, c_span = _hex(call["client"].context)
        e_trace, e_span = _hex(call["engine"].context)
        rows = query(db, "SELECT span_id, parent_span_id, name, attributes FROM spans WHERE trace_id = ?", [c_trace])
        by_id = {r[0]: r for r in rows}
        assert e_span in by_id, (call["kind"], [r[2] for r in rows])
        attrs = json.loads(by_id[e_span][3])
        assert by_id[e_span][1] == c_span  # the engine's pass is a child of the client's
        assert attrs["llmtrace.join.by"] == "response_id"
        assert attrs["llmtrace.join.trace_id"] == e_trace  # the engine's own id is kept
        assert query(db, "SELECT count(*) FROM spans WHERE trace_id = ?", [e_trace]) == [(0,)]
        names = {r[2] for r in rows}
        if call["kind"] == "vllm":
            assert {"vllm_queue", "vllm_prefill"} <= names
        if call["kind"] == "sglang":
            assert {"Bootstrap Room 0x0", "scheduler [TP 0] (host:5e1f0c2a | pid:4242)"} <= names
            assert attrs["llmtrace.join.parent_span_id"]  # it was under its bootstrap room span
        if call["kind"] == "dynamo":
            assert "router.route_request" in names  # the engine's whole trace moved, its router too
    for call in [c for c in joined["calls"] if c.get("late")]:
        c_trace, _ = _hex(call["client"].context)
        assert query(db, "SELECT count(*) FROM spans WHERE trace_id = ? AND name = 'vllm_decode'", [c_trace]) == [(1,)]


def test_unmatched_sides_keep_their_traces(joined: dict[str, Any]) -> None:
    db = joined["db"]
    for span in (joined["lonely"], joined["orphan"]):
        t, s = _hex(span.context)
        rows = query(db, "SELECT parent_span_id, attributes FROM spans WHERE trace_id = ? AND span_id = ?", [t, s])
        assert rows and rows[0][0] is None and "llmtrace.join.by" not in json.loads(rows[0][1])
    # only their two ids wait for another side; every joined call's are gone
    assert sorted(query(db, "SELECT key, side FROM llmtrace_join_keys")) == [("nobody-answered", "client"),
                                                                          ("nobody-asked", "server")]


def test_one_pass_with_both_sides(joined: dict[str, Any]) -> None:
    from llmtrace.tracer.storage import pass_table
    from llmtrace.tracer.storage.store import read_connection

    db = joined["db"]
    with read_connection(db) as conn:  # the writer's kept pass table followed the rewrite: readers may trust it
        assert pass_table.is_current(conn)
    for call in joined["calls"]:
        c_trace, c_span = _hex(call["client"].context)
        rows = query(db, "SELECT span_id, server_span_id, observed_by FROM passes WHERE trace_id = ?", [c_trace])
        assert len(rows) == 1, (call["kind"], rows)
        assert rows[0][1] == _hex(call["engine"].context)[1], (call["kind"], rows)


def test_waterfalls_show_the_join(joined: dict[str, Any]) -> None:
    from llmtrace.tui.data.store_reader import StoreReader
    from llmtrace.tui.data.waterfall_model import build_rows

    call = next(c for c in joined["calls"] if c["kind"] == "sglang")
    c_trace, _ = _hex(call["client"].context)
    reader = StoreReader(joined["db"])
    try:
        rows = build_rows(reader.trace(c_trace))
    finally:
        reader.close()
    labels = [(r.depth, r.label) for r in rows]
    client = next(d for d, lab in labels if lab.startswith("client chat llama"))
    engine = next((d, lab) for d, lab in labels if "Req 7f3a1b2c" in lab)
    assert engine[0] == client + 1 and engine[1].startswith("⇄ server") and engine[1].endswith(
        "· joined by response id"), labels
    out = joined["tmp"] / "report.html"
    run = subprocess.run([sys.executable, "-m", "llmtrace.cli", "report", "--db", str(joined["db"]), "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "joined to the call by response id" in Path(out).read_text()


async def test_the_explorer_draws_the_joined_trace(joined: dict[str, Any]) -> None:
    """The explorer (Textual's pilot) opens the app's trace: the engine's pass is a row of it, marked."""
    from rich.console import Console

    from llmtrace.tui.app import ExplorerApp
    from llmtrace.tui.components.stage_pane import StagePane, explain

    call = next(c for c in joined["calls"] if c["kind"] == "vllm")
    c_trace, _ = _hex(call["client"].context)
    e_span = _hex(call["engine"].context)[1]
    app = ExplorerApp(joined["db"], analyze_after_s=None)  # type: ignore[arg-type]
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.trace_pane.open(c_trace, e_span)
        for _ in range(50):
            await pilot.pause()
            await app.workers.wait_for_complete()
            if app.trace_pane.waterfall.rows:
                break
        waterfall = app.trace_pane.waterfall
        row = next(i for i, r in enumerate(waterfall.rows) if r.span.span_id == e_span)
        drawn = str(waterfall.get_option_at_index(row).prompt)
        assert drawn.strip().startswith("⇄ server llm_request"), drawn  # the label's end is cut at this width
        assert {r.span.name for r in waterfall.rows} >= {"chat llama", "llm_request", "vllm_queue"}
        pane = app.query_one(StagePane)  # the highlighted engine pass explained: how it was joined, and why
        assert pane.span is not None and pane.span.span_id == e_span
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(explain(pane.span))
        text = console.export_text()
        assert "llmtrace.join.by" in text and "response_id" in text and "no traceparent reached the engine" in text


def test_diagnose_names_the_engine_queue_on_the_apps_traces(joined: dict[str, Any]) -> None:
    run = subprocess.run([sys.executable, "-m", "llmtrace.cli", "diagnose", "--db", str(joined["db"]), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    findings = json.loads(run.stdout)["findings"]
    queue = [f for f in findings if f["stage"] == "arrival.admission"]
    assert queue, [(f["stage"], f["title"]) for f in findings[:5]]
    app_traces = {_hex(c["client"].context)[0] for c in joined["calls"] if c["kind"] == "vllm"}
    assert queue[0]["trace_ids"] and set(queue[0]["trace_ids"]) <= app_traces, queue[0]


CRASHER = """
import os, sys
from pathlib import Path
from llmtrace.tracer.collect.wal import WriteAheadLog
wal = WriteAheadLog(Path(sys.argv[1]))
wal.open()
for path in sys.argv[2:]:
    wal.sync(wal.append(Path(path).read_bytes(), "application/x-protobuf", None))
os._exit(0)  # died with everything logged and nothing committed (as kill -9 would leave it)
"""


def _bodies(kind: str, rid: str, start: int) -> tuple[bytes, bytes, Any, Any]:
    """The client's and vLLM's spans of one call as two OTLP/protobuf bodies (what each exporter POSTs)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    out = []
    spans = []
    for service in ("returns-app", kind):
        exp = InMemorySpanExporter()
        tp = TracerProvider(resource=Resource.create({"service.name": service}))
        tp.add_span_processor(SimpleSpanProcessor(exp))
        spans.append(_client(tp, start, rid, start + 2600 * MS) if service == "returns-app"
                     else _vllm(tp, start + MS, rid, queued=True))
        out.append(encode_spans(exp.get_finished_spans()).SerializeToString())
    return out[0], out[1], spans[0], spans[1]


def test_a_replayed_log_joins_and_never_duplicates_a_moved_span(tmp_path: Path) -> None:
    """kill -9 leaves acknowledged bodies in the write-ahead log: a pair committed and joined before the
    kill (its engine spans come back under their old trace id) and a pair never committed. After the
    restart both pairs are joined and no span is stored twice."""
    c1, e1, client1, eng1 = _bodies("vllm", "chatcmpl-before-the-kill", T0)
    c2, e2, client2, eng2 = _bodies("vllm", "chatcmpl-only-in-the-log", T0 + 5000 * MS)
    col = start_collector(tmp_path)
    try:
        for body in (e1, c1):
            req = urllib.request.Request(col.endpoint, data=body, headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
        col.wait_written(2 + 3 + 1)
    finally:
        assert col.stop() == 0
    files = []
    for i, body in enumerate((e1, c1, e2, c2)):
        f = tmp_path / f"body{i}"
        f.write_bytes(body)
        files.append(str(f))
    (tmp_path / "crash.py").write_text(CRASHER)
    wal = tmp_path / "collected.duckdb.collect-wal"
    subprocess.run([sys.executable, str(tmp_path / "crash.py"), str(wal), *files], check=True, timeout=60)
    col = start_collector(tmp_path, name="restart")
    try:
        assert "replayed" in col.log(), col.log()
    finally:
        assert col.stop() == 0
    db = tmp_path / "collected.duckdb"
    assert query(db, "SELECT count(*) - count(DISTINCT span_id) FROM spans") == [(0,)]
    for client, eng in ((client1, eng1), (client2, eng2)):
        c_trace, c_span = _hex(client.context)
        e_trace, e_span = _hex(eng.context)
        assert query(db, "SELECT trace_id, parent_span_id FROM spans WHERE span_id = ?", [e_span]) == [(c_trace, c_span)]
        assert query(db, "SELECT count(*) FROM spans WHERE trace_id = ?", [e_trace]) == [(0,)]


def _dynamo_routed(tmp: Path) -> tuple[Path, dict[str, set[str]], dict[str, list[dict[str, Any]]]]:
    """Dynamo's KV router drops the context: its router and engine spans are a trace of their own, under no
    client span, in Dynamo's own names (kv_router.find_matches, kv_router.route_request: lib/llm/src/kv_router;
    engine.generate: tests/frontend/test_unified_worker_otlp_export.py, PR 9543). 7 of 10 requests go to a
    worker holding none of the prefix (overlap_blocks 0, the engine reused nothing) while the twin's go to the
    one holding 30 of its 32 blocks."""
    col = start_collector(tmp)
    apps: dict[str, set[str]] = {}
    try:
        for service, away_of in (("legal-app", lambda i: i % 10 not in (0, 5, 8)), ("legal-app-twin", lambda i: False)):
            app, dyn = otlp_provider(col.endpoint, service), otlp_provider(col.endpoint, service)
            t = dyn.get_tracer("dynamo.frontend")
            apps[service] = set()
            for i in range(10):
                start, rid = T0 + i * 4000 * MS, f"chatcmpl-{service}-{i:04d}"
                away = away_of(i)
                # KV mode (lib/llm/src/kv_router): the prompt's blocks and the block size, then the route with
                # the chosen worker's overlap; Dynamo's spans name no best worker's overlap
                http = t.start_span("http-request", kind=SpanKind.SERVER, start_time=start + MS, attributes={
                    "request_id": rid, "uri": "/v1/chat/completions"})  # the frontend's root (lib/llm/src/http)
                ctx = trace.set_span_in_context(http)
                t.start_span("kv_router.find_matches", context=ctx, start_time=start + MS, attributes={
                    "block_count": 32, "block_size": 64}).end(end_time=start + MS + 100_000)
                route = t.start_span("kv_router.route_request", context=ctx, start_time=start + MS, attributes={
                    "request_id": rid, "worker_id": 7587890 + (i % 4 if away else 7), "dp_rank": 0,
                    "overlap_blocks": 0 if away else 30, "phase": "Aggregated"})
                ttft = 900.0 if away else 140.0
                t.start_span("engine.generate", context=trace.set_span_in_context(route), start_time=start + 2 * MS,
                             attributes={"request_id": rid, "disagg_role": "decode", "model": "legal-70b",
                                         "input_tokens": 2000, "ttft_ms": ttft, "output_tokens": 120,
                                         "finish_reason": "stop"}).end(end_time=start + int((ttft + 2400) * MS))
                route.end(end_time=start + int((ttft + 2401) * MS))
                http.end(end_time=start + int((ttft + 2402) * MS))
                client = _client(app, start, rid, start + int((ttft + 2500) * MS),
                                 cached=0 if away else 30 * 64)  # what the engine reused, as the app was told
                apps[service].add(_hex(client.context)[0])
            app.shutdown()
            dyn.shutdown()
        col.wait_written(2 * 10 * 5, timeout_s=60)
    finally:
        assert col.stop() == 0, col.log()
    return col.db, apps, diagnose_services(col.db, list(apps))


def test_dynamo_routes_are_on_the_apps_traces(tmp_path: Path) -> None:
    """Joined by the request id, each route is an arrival.replica_selection row on the trace the app started,
    with the chosen worker's overlap and the prompt's blocks of 64 tokens."""
    db, apps, _ = _dynamo_routed(tmp_path)
    rows = query(db, "SELECT trace_id, attributes FROM spans WHERE stage = 'arrival.replica_selection'")
    assert len(rows) == 20 and {str(t) for t, _ in rows} == apps["legal-app"] | apps["legal-app-twin"]
    sel = [json.loads(str(a)) for _, a in rows]
    assert {a["llmtrace.replica.total_blocks"] for a in sel} == {32} and {a["llmtrace.replica.block_tokens"]
                                                                       for a in sel} == {64}
    assert sorted(a["llmtrace.replica.expected_hit_blocks"] for a in sel).count(0) == 7


def test_dynamo_names_no_best_worker_so_routed_away_cannot_fire(tmp_path: Path) -> None:
    """What Dynamo can and cannot tell (read in ai-dynamo/dynamo's source): its route span names the chosen
    worker's overlap only (kv_router.route_request's overlap_blocks, lib/llm/src/kv_router); the best worker's
    overlap goes to Prometheus (router_overlap_blocks_lost, router_non_max_overlap_selections_total:
    lib/llm/src/kv_router/metrics.rs) and to a DEBUG log line written off the scheduler actor in a
    spawn_blocking task, outside any request span, for prefill routers only (embedded.rs
    non_max_overlap_observer, dispatched by lib/kv-router/src/scheduling/queue.rs). So the routed-away finding
    (analyzers/cache/routed_away.py, which needs the best replica's blocks) does not come out on Dynamo's
    spans; the requests' lost prefix still does, as the cache finding on the app's own traces."""
    db, apps, found = _dynamo_routed(tmp_path)
    sel = [json.loads(str(a)) for (a,) in query(db, "SELECT attributes FROM spans "
                                                     "WHERE stage = 'arrival.replica_selection'")]
    assert len(sel) == 20 and not any("llmtrace.replica.best_hit_blocks" in a for a in sel)
    assert not any(f["stage"] == "arrival.replica_selection" for f in found["legal-app"] + found["legal-app-twin"])
    top = found["legal-app"][0] if found["legal-app"] else {}
    assert top.get("stage") == "cache.prefix_match", [(f["stage"], f["title"]) for f in found["legal-app"][:3]]
    assert top["trace_ids"] and set(top["trace_ids"]) <= apps["legal-app"]
    assert not any(f["stage"] == "cache.prefix_match" and f["severity"] != "info" for f in found["legal-app-twin"])
