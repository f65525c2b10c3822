"""Hostile and malformed OTLP bodies and headers, fuzzed with hypothesis, against a real ``llmtrace collect``
while a well-behaved app exports next to them: never a 5xx, never a hang, healthy afterwards, and not one of
the good app's spans lost. Bounded: a few dozen examples per shape, well under a minute in all."""

from __future__ import annotations

import gzip
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from collector_helpers import RunningCollector, otlp_provider, query, start_collector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace.id_generator import IdGenerator

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ALLOWED = {200, 400, 401, 404, 405, 408, 411, 413, 429}
# The good app's exporter thread draws from the random module (retry jitter, sampling) while hypothesis
# generates examples on the main thread; hypothesis cannot tell the two apart and warns.
pytestmark = pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")


class _UrandomIds(IdGenerator):
    def generate_span_id(self) -> int:
        return int.from_bytes(os.urandom(8), "big") or 1

    def generate_trace_id(self) -> int:
        return int.from_bytes(os.urandom(16), "big") or 1


class GoodApp:
    """A real app exporting through the stock OTLP exporter the whole time the fuzzing runs."""

    def __init__(self, endpoint: str) -> None:
        self.tp = otlp_provider(endpoint, "good")
        # ids from os.urandom: the SDK's default uses the random module, which hypothesis warns about
        self.tp.id_generator = _UrandomIds()
        self.tracer = self.tp.get_tracer("good")
        self.sent: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            span = self.tracer.start_span("good op", attributes={"i": i})
            self.sent.append(f"{span.get_span_context().span_id:016x}")
            span.end()
            i += 1
            time.sleep(0.01)

    def finish(self) -> list[str]:
        self.stop.set()
        self.thread.join(5)
        assert self.tp.force_flush(30_000)
        self.tp.shutdown()
        return self.sent


@pytest.fixture(scope="module")
def col(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCollector]:
    c = start_collector(tmp_path_factory.mktemp("fuzz"), "--max-body", "1MB", "--header-timeout", "3",
                        "--body-timeout", "3")
    app = GoodApp(c.endpoint)
    try:
        yield c
        sent = app.finish()
        c.wait_written(len(sent))
        assert httpx.get(f"http://127.0.0.1:{c.port}/healthz", timeout=5).status_code == 200
        assert c.process.poll() is None
    finally:
        app.stop.set()
        assert c.stop() == 0
    stored = {s for (s,) in query(c.db, "SELECT span_id FROM spans WHERE service = 'good'")}
    assert len(sent) > 50 and not set(sent) - stored, f"{len(set(sent) - stored)} good spans lost"


def _send(port: int, head: bytes, body: bytes, timeout_s: float = 10.0) -> int:
    """One request on a raw socket; the status code of the answer (which must come, and not be 5xx)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        try:
            s.sendall(head + body)
            s.shutdown(socket.SHUT_WR)  # what the server has not got by now will not come
        except OSError:
            pass  # it answered (and closed) before taking everything: read what it said
        data = b""
        t = time.monotonic()
        while b"\r\n" not in data:
            piece = s.recv(4096)
            assert piece, f"connection closed without an answer ({head[:80]!r})"
            data += piece
        assert time.monotonic() - t < timeout_s
    code = int(data.split(b" ", 2)[1])
    assert code in ALLOWED, (code, head[:200], body[:200], data[:300])
    return code


def _head(length: int | None, ctype: str = "application/x-protobuf", extra: str = "") -> bytes:
    cl = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n{cl}{extra}\r\n".encode()


# -- protobuf ------------------------------------------------------------------------------------------
_scalar = st.one_of(st.text(max_size=50), st.integers(-2**63, 2**63 - 1), st.booleans(),
                    st.floats(allow_nan=True, allow_infinity=True), st.binary(max_size=20))


def _set(v: AnyValue, x: object, depth: int = 0) -> None:
    if isinstance(x, bool):
        v.bool_value = x
    elif isinstance(x, int):
        v.int_value = x
    elif isinstance(x, float):
        v.double_value = x
    elif isinstance(x, bytes):
        v.bytes_value = x
    elif isinstance(x, str):
        v.string_value = x
    elif isinstance(x, list):
        v.array_value.SetInParent()
        for y in x:
            _set(v.array_value.values.add(), y, depth + 1)
    elif isinstance(x, dict):
        v.kvlist_value.SetInParent()
        for k, y in x.items():
            kv = v.kvlist_value.values.add()
            kv.key = k
            _set(kv.value, y, depth + 1)


_value = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
KEYS = st.sampled_from(["gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token",
                        "gen_ai.latency.time_in_model_decode", "gen_ai.usage.prompt_tokens",
                        "gen_ai.usage.completion_tokens", "gen_ai.operation.name", "gen_ai.request.model",
                        "openinference.span.kind", "llm.token_count.prompt", "llm.invocation_parameters",
                        "gen_ai.response.finish_reasons", "http.request.header.authorization", "llmtrace.stage",
                        "service.version", "gen_ai.input.messages"]) | st.text(max_size=30)
_span = st.fixed_dictionaries({
    "tid": st.binary(min_size=0, max_size=20) | st.binary(min_size=16, max_size=16),
    "sid": st.binary(min_size=0, max_size=10) | st.binary(min_size=8, max_size=8),
    "start": st.integers(0, 2**64 - 1), "end": st.integers(0, 2**64 - 1),
    "kind": st.integers(0, 5), "name": st.text(max_size=40),
    "attrs": st.dictionaries(KEYS, _value, max_size=6),
})


@FUZZ
@given(spans=st.lists(_span, max_size=6), mutate=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                                           max_size=3))
def test_protobuf_bodies(col: RunningCollector, spans: list[dict[str, object]], mutate: list[tuple[int, int]]) -> None:
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    for sp in spans:
        s = ss.spans.add()
        s.trace_id, s.span_id = sp["tid"], sp["sid"]  # type: ignore[assignment]
        s.start_time_unix_nano, s.end_time_unix_nano = sp["start"], sp["end"]  # type: ignore[assignment]
        s.kind, s.name = sp["kind"], sp["name"]  # type: ignore[assignment]
        for k, v in sp["attrs"].items():  # type: ignore[attr-defined]
            kv = s.attributes.add()
            kv.key = k
            _set(kv.value, v)
    body = bytearray(req.SerializeToString())
    for pos, byte in mutate:  # flipped bytes: malformed protobuf, which must be a 400, not a crash
        if body:
            body[pos % len(body)] = byte
    _send(col.port, _head(len(body)), bytes(body))


@FUZZ
@given(junk=st.binary(max_size=3000), gz=st.booleans())
def test_random_bytes(col: RunningCollector, junk: bytes, gz: bool) -> None:
    body = gzip.compress(junk) if gz else junk
    extra = "Content-Encoding: gzip\r\n" if gz else ""
    _send(col.port, _head(len(body), extra=extra), body)


# -- JSON ------------------------------------------------------------------------------------------------
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                  max_size=4), max_leaves=15)
_json_span = st.fixed_dictionaries({
    "traceId": st.text("0123456789abcdefXYZ-", min_size=0, max_size=34),
    "spanId": st.text("0123456789abcdef-", min_size=0, max_size=18),
    "name": _json, "startTimeUnixNano": _json, "endTimeUnixNano": _json, "kind": _json,
    "attributes": st.lists(st.fixed_dictionaries({"key": _json, "value": _json}) |
                           st.fixed_dictionaries({"key": st.text(max_size=10), "value": st.fixed_dictionaries(
                               {"doubleValue": st.floats() | st.text(max_size=5)})}), max_size=4),
})


@FUZZ
@given(spans=st.lists(_json_span | _json, max_size=5), shape=st.integers(0, 3), depth=st.integers(0, 3000))
def test_json_bodies(col: RunningCollector, spans: list[object], shape: int, depth: int) -> None:
    doc: object = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    text = json.dumps(doc, allow_nan=True)
    if shape == 1:
        text = text.replace("[]", "[" * depth + "]" * depth, 1)  # deep nesting
    elif shape == 2:
        text = text.replace('"spans": [', '"spans": [' + "9" * depth + ", ", 1)  # a huge integer
    elif shape == 3:
        text = text[: depth % (len(text) + 1)]  # truncated
    body = text.encode("utf-8", "surrogatepass")
    _send(col.port, _head(len(body), "application/json"), body)


# -- headers and framing ---------------------------------------------------------------------------------
@FUZZ
@given(ctype=st.sampled_from(["application/x-protobuf", "application/json", "text/plain", "", "application/json; x",
                              "application/protobuf"]) | st.text("abc/;= x", max_size=20),
       enc=st.sampled_from(["", "gzip", "deflate", "br", "identity", "gzip, gzip"]),
       length=st.sampled_from(["ok", "short", "none", "neg", "junk", "huge"]),
       chunks=st.lists(st.sampled_from(["-1", "0x10", "ffffffffffffffffff", "5", "z", ""]), max_size=3),
       auth=st.sampled_from(["", "Bearer x", "Basic y", "bearer"]))
def test_headers_and_framing(col: RunningCollector, ctype: str, enc: str, length: str, chunks: list[str],
                             auth: str) -> None:
    body = ExportTraceServiceRequest().SerializeToString() + b"\x0a\x00"
    extra = f"Content-Encoding: {enc}\r\n" if enc else ""
    extra += f"Authorization: {auth}\r\n" if auth else ""
    if chunks:
        framed = b"".join(f"{c}\r\n".encode() + body + b"\r\n" for c in chunks) + b"0\r\n\r\n"
        _send(col.port, _head(None, ctype, extra + "Transfer-Encoding: chunked\r\n"), framed)
        return
    cl = {"ok": len(body), "short": len(body) + 5, "none": None, "neg": -4, "junk": "1e3", "huge": 10**30}[length]
    head = _head(None, ctype, extra + (f"Content-Length: {cl}\r\n" if cl is not None else ""))
    _send(col.port, head, body)


# -- methods and conflicting framing (hostile-input run: 501 for PUT, two Content-Lengths accepted) ---------
def _exchange(port: int, raw: bytes, timeout_s: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One raw request; the answer's status, headers (lower-case names) and body, read to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(raw)
        data = b""
        while piece := s.recv(65536):
            data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ", 2)[1]), headers, body


@pytest.mark.parametrize("method", ["PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE", "GET"])
def test_other_methods_on_traces_are_405_naming_post(col: RunningCollector, method: str) -> None:
    body = ExportTraceServiceRequest().SerializeToString() + b"\x0a\x00"
    head = (f"{method} /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    code, headers, got = _exchange(col.port, head + body)
    assert code == 405 and headers.get("allow") == "POST", (code, headers)
    assert got == b"" if method == "HEAD" else int(headers["content-length"]) == len(got) > 0


def test_head_on_health_is_its_get_without_a_body(col: RunningCollector) -> None:
    code, headers, got = _exchange(col.port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert code == 200 and int(headers["content-length"]) > 0 and got == b""
    code, headers, _ = _exchange(col.port, b"DELETE /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert code == 405 and headers.get("allow") == "GET, HEAD"


@pytest.mark.parametrize("lengths", [("7", "30"), ("30", "7"), ("9", "9"), ("9", "9, 9")])
def test_two_content_lengths_are_400(col: RunningCollector, lengths: tuple[str, str]) -> None:
    """Two Content-Length headers give two ends to one body (request smuggling through a proxy that reads the
    other one): 400 and close, whatever the values, and nothing of it is stored."""
    body = _named_span_body("smuggled-cl")
    extra = "".join(f"Content-Length: {v}\r\n" for v in lengths)
    code, headers, _ = _exchange(col.port, _head(None, extra=extra) + body)
    assert code == 400 and headers.get("connection") == "close", (code, headers)


def test_content_length_beside_chunked_is_400(col: RunningCollector) -> None:
    body = _named_span_body("smuggled-te")
    framed = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    code, headers, _ = _exchange(col.port, _head(len(body), extra="Transfer-Encoding: chunked\r\n") + framed)
    assert code == 400 and headers.get("connection") == "close", (code, headers)


def test_refused_framing_stored_nothing(col: RunningCollector) -> None:
    """Runs after the two framing tests: a good body through the same collector is stored, theirs are not."""
    body = _named_span_body("framing-control")
    assert _exchange(col.port, _head(len(body), extra="Connection: close\r\n") + body)[0] == 200
    deadline = time.monotonic() + 30  # (the good app keeps the queue busy: wait for this span, not an empty queue)
    while not query(col.db, "SELECT 1 FROM spans WHERE name = 'framing-control'") and time.monotonic() < deadline:
        time.sleep(0.1)
    names = {n for (n,) in query(col.db, "SELECT name FROM spans WHERE name LIKE 'smuggled%' OR name = "
                                         "'framing-control'")}
    assert names == {"framing-control"}


def _named_span_body(name: str) -> bytes:
    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = os.urandom(16), os.urandom(8)
    span.start_time_unix_nano, span.end_time_unix_nano = time.time_ns(), time.time_ns() + 1000
    span.name = name
    return req.SerializeToString()
