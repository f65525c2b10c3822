"""Spans that went through the real OpenTelemetry SDK and OTLP/HTTP exporter (``llmtrace.init(otlp_endpoint=)``)
land in ``otel_traces`` as the Collector's ClickHouse exporter writes them (a loopback receiver here does
the exporter's conversion: attribute values through pcommon's AsString, kind and status names), and read
back through our ClickHouse ``spans``/``passes`` views as the same rows the app's own DuckDB store holds."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

import llmtrace  # noqa: E402
from llmtrace.tracer import recording as rec  # noqa: E402
from llmtrace.tracer.storage.clickhouse import ClickHouseConnection, connect, ensure_views  # noqa: E402
from llmtrace.tracer.storage.store import read_connection  # noqa: E402

_KINDS = ["Unspecified", "Internal", "Server", "Client", "Producer", "Consumer"]  # Go traceutil.SpanKindStr
_STATUS = ["Unset", "Ok", "Error"]


def _as_string(v: object) -> str:
    """pcommon.Value.AsString: strings as they are, bool/int/double as text, lists and maps as JSON."""
    kind = v.WhichOneof("value")  # type: ignore[attr-defined]
    if kind == "string_value":
        return v.string_value  # type: ignore[attr-defined]
    if kind == "bool_value":
        return "true" if v.bool_value else "false"  # type: ignore[attr-defined]
    if kind == "int_value":
        return str(v.int_value)  # type: ignore[attr-defined]
    if kind == "double_value":
        d = v.double_value  # type: ignore[attr-defined]
        return str(int(d)) if d == int(d) and math.isfinite(d) else repr(d)  # Go FormatFloat(f, 'f', -1, 64)
    return json.dumps(_plain(v), separators=(",", ":"))


def _plain(v: object) -> object:
    kind = v.WhichOneof("value")  # type: ignore[attr-defined]
    if kind == "array_value":
        return [_plain(x) for x in v.array_value.values]  # type: ignore[attr-defined]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in v.kvlist_value.values}  # type: ignore[attr-defined]
    return getattr(v, kind) if kind else None


def _q(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _map(kvs: object) -> str:
    return "map(" + ", ".join(f"{_q(kv.key)}, {_q(_as_string(kv.value))}" for kv in kvs) + ")" if kvs else "map()"  # type: ignore[attr-defined]


def _rows(req: ExportTraceServiceRequest) -> list[str]:
    out = []
    for rs in req.resource_spans:
        res = {kv.key: _as_string(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                ev = s.events
                out.append(
                    f"(fromUnixTimestamp64Nano(toInt64({s.start_time_unix_nano})), {_q(s.trace_id.hex())}, "
                    f"{_q(s.span_id.hex())}, {_q(s.parent_span_id.hex())}, {_q(s.trace_state)}, {_q(s.name)}, "
                    f"{_q(_KINDS[s.kind])}, {_q(res.get('service.name', ''))}, {_map(rs.resource.attributes)}, "
                    f"{_q(ss.scope.name)}, {_q(ss.scope.version)}, {_map(s.attributes)}, "
                    f"{max(0, s.end_time_unix_nano - s.start_time_unix_nano)}, {_q(_STATUS[s.status.code])}, "
                    f"{_q(s.status.message)}, "
                    f"[{', '.join(f'fromUnixTimestamp64Nano(toInt64({e.time_unix_nano}))' for e in ev)}], "
                    f"[{', '.join(_q(e.name) for e in ev)}], [{', '.join(_map(e.attributes) for e in ev)}], "
                    "[], [], [], [])")
    return out


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, ClickHouseConnection]]:
    ch = connect(f"chdb://{tmp_path / 'ch'}")
    ensure_views(ch, create_table=True)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            req = ExportTraceServiceRequest.FromString(body)
            rows = _rows(req)
            if rows:
                with lock:
                    ch.raw("INSERT INTO otel_traces VALUES " + ", ".join(rows))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()
            self.wfile.write(b"")

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1/traces", ch
    finally:
        srv.shutdown()
        ch.close()


def test_spans_through_the_real_otlp_exporter_read_back_as_the_store_holds_them(
        tmp_path: Path, receiver: tuple[str, ClickHouseConnection]) -> None:
    url, ch = receiver
    db = tmp_path / "app.duckdb"
    llmtrace.init(db=db, otlp_endpoint=url, service_name="shop", deploy="v7", strict=True)
    try:
        for i in range(6):
            with rec.start_pass("tiny", side="client", provider="openai", attributes={
                    "gen_ai.usage.input_tokens": 100 + i, "gen_ai.usage.output_tokens": 7,
                    "gen_ai.usage.cache_read.input_tokens": 64, "llmtrace.ttft_ms": 12.5 + i,
                    "gen_ai.response.finish_reasons": ["length" if i % 3 == 0 else "stop"],
                    "gen_ai.request.temperature": 0.0, "session.id": f"s{i % 2}"}) as p:
                with rec.stage("gen.stop", {"llmtrace.stop.matched": "max_tokens" if i % 3 == 0 else "eos"}, parent=p):
                    pass
    finally:
        llmtrace.shutdown()  # flushes both the store and the OTLP exporter
    with read_connection(db) as conn:
        want_spans = conn.execute("SELECT span_id, trace_id, parent_span_id, name, kind, operation, stage, phase, "
                                  "service, deploy, start_ns, end_ns, status, attributes FROM spans ORDER BY span_id").fetchall()
        cur = conn.execute("SELECT * FROM passes ORDER BY span_id")
        names = [d[0] for d in cur.description]
        want_passes = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    got_spans = ch.execute("SELECT span_id, trace_id, parent_span_id, name, kind, operation, stage, phase, service, "
                           "deploy, start_ns, end_ns, status, attributes FROM spans ORDER BY span_id").fetchall()
    assert len(want_spans) == 12 and len(got_spans) == 12
    for w, g in zip(want_spans, got_spans, strict=True):
        assert w[:13] == g[:13]
        assert json.loads(g[13]) == json.loads(w[13])  # every attribute, typed back from the exporter's strings
    cur = ch.execute("SELECT * FROM passes ORDER BY span_id")
    got_passes = [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur.fetchall()]
    assert len(got_passes) == 6 and [list(g) for g in got_passes] == [list(w) for w in want_passes]
    for w, g in zip(want_passes, got_passes, strict=True):
        assert {k: v for k, v in g.items() if w[k] != v} == {}  # every column, ts as DuckDB's naive UTC
