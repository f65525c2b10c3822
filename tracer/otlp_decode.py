"""OTLP/HTTP trace payloads (protobuf or JSON, optionally gzip) straight into the store's Arrow columns.

The protobuf is parsed once by the C (upb) runtime and walked span by span into column lists; there is
no intermediate SDK span object. Spans from other instrumentations are mapped onto the stage model on
the way (``otlp_mapping``); the raw attributes always stay in the ``attributes`` JSON.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .exporter import ARROW_SCHEMA
from .otlp_mapping import Mapper
from .schema import SPAN_COLUMNS

_KINDS = ("internal", "internal", "server", "client", "producer", "consumer")  # index = OTLP SpanKind enum
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
_COLUMN_NAMES = tuple(n for n, _ in SPAN_COLUMNS)


class PayloadError(ValueError):
    """The request body cannot be read as an OTLP trace export; the message is sent back with a 400."""


class PayloadTooLarge(PayloadError):
    """The body (after decompression) is over the limit; answered with a 413."""


@dataclass(frozen=True, slots=True)
class Decoded:
    table: pa.Table
    received: int  # spans in the request
    rejected: int  # spans dropped as invalid (reported back through OTLP partial success)
    reason: str | None


def decompress(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """Undo Content-Encoding, refusing to inflate past ``max_bytes`` (a small gzip bomb stays small)."""
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc not in ("gzip", "deflate"):
        raise PayloadError(f"unsupported Content-Encoding {encoding!r} (use gzip or none)")
    wbits = 16 + zlib.MAX_WBITS if enc == "gzip" else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise PayloadError(f"body is not valid {enc}: {exc}") from None
    if len(out) > max_bytes:
        raise PayloadTooLarge(f"decompressed body is over the {max_bytes} byte limit")
    if not d.eof:
        raise PayloadError(f"truncated {enc} body")
    return out


def parse_request(body: bytes, content_type: str | None) -> ExportTraceServiceRequest:
    ctype = (content_type or "application/x-protobuf").split(";")[0].strip().lower()
    req = ExportTraceServiceRequest()
    if ctype in ("application/x-protobuf", "application/protobuf", "application/octet-stream"):
        try:
            req.ParseFromString(body)
        except DecodeError as exc:
            raise PayloadError(f"malformed protobuf ExportTraceServiceRequest: {exc}") from None
        return req
    if ctype == "application/json":
        return _parse_json(body)
    raise PayloadError(f"unsupported Content-Type {content_type!r} (use application/x-protobuf or application/json)")


def _parse_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PayloadError("JSON body must be an object with resourceSpans")
    # OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping expects base64.
    try:
        for rs in doc.get("resourceSpans") or doc.get("resource_spans") or []:
            for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
                for span in ss.get("spans") or []:
                    _hex_ids_to_b64(span)
                    for link in span.get("links") or []:
                        _hex_ids_to_b64(link)
        req = ExportTraceServiceRequest()
        json_format.ParseDict(doc, req, ignore_unknown_fields=True)
    except (json_format.ParseError, AttributeError, TypeError, ValueError) as exc:
        raise PayloadError(f"JSON is not an OTLP ExportTraceServiceRequest: {str(exc).splitlines()[0]}") from None
    return req


def _hex_ids_to_b64(obj: dict[str, object]) -> None:
    for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
        v = obj.get(key)
        if isinstance(v, str) and v:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(v)).decode()
            except ValueError:
                raise PayloadError(f"{key} {v[:40]!r} is not hex") from None


def any_value(v: object) -> object:
    which = v.WhichOneof("value")  # type: ignore[attr-defined]
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]  # type: ignore[attr-defined]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}  # type: ignore[attr-defined]
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()  # type: ignore[attr-defined]
    return getattr(v, which)


def attributes(kvs: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in kvs:  # type: ignore[attr-defined]
        v = kv.value
        which = v.WhichOneof("value")
        if which == "string_value":
            out[kv.key] = v.string_value
        elif which == "int_value":
            out[kv.key] = v.int_value
        elif which == "double_value":
            out[kv.key] = v.double_value
        elif which == "bool_value":
            out[kv.key] = v.bool_value
        elif which is not None:
            out[kv.key] = any_value(v)
    return out


_ZERO16 = b"\0" * 16
_ZERO8 = b"\0" * 8


def request_to_table(req: ExportTraceServiceRequest, mapper: Mapper | None = None) -> Decoded:
    """Walk the request into one Arrow table in SPAN_COLUMNS order; invalid spans are counted, not fatal.

    This loop is the collector's hot path (a few microseconds a span): locals only, no per-span calls
    beyond what the protobuf runtime needs.
    """
    cols: dict[str, list[object]] = {n: [] for n in _COLUMN_NAMES}
    trace_a, span_a, parent_a, name_a, kind_a = (cols["trace_id"].append, cols["span_id"].append,
                                                  cols["parent_span_id"].append, cols["name"].append,
                                                  cols["kind"].append)
    op_a, stage_a, phase_a, service_a, deploy_a = (cols["operation"].append, cols["stage"].append,
                                                    cols["phase"].append, cols["service"].append,
                                                    cols["deploy"].append)
    start_a, end_a, dur_a, status_a, msg_a = (cols["start_ns"].append, cols["end_ns"].append,
                                               cols["duration_ms"].append, cols["status"].append,
                                               cols["status_message"].append)
    attr_a, res_a, ev_a = cols["attributes"].append, cols["resource"].append, cols["events"].append
    received = rejected = 0
    reason: str | None = None
    dumps = _dumps
    kinds = _KINDS
    for rs in req.resource_spans:
        res_attrs = attributes(rs.resource.attributes)
        res_json = dumps(res_attrs)
        service = res_attrs.get("service.name")
        service = str(service) if service is not None else None
        res_version = res_attrs.get("service.version")
        res_version = str(res_version) if res_version is not None else None
        for ss in rs.scope_spans:
            spans = ss.spans
            received += len(spans)
            for s in spans:
                tid = s.trace_id
                sid = s.span_id
                if len(tid) != 16 or len(sid) != 8 or tid == _ZERO16 or sid == _ZERO8:
                    rejected += 1
                    reason = "span with an invalid trace_id or span_id (need 16 and 8 non-zero bytes)"
                    continue
                # attributes(), inlined on purpose to spare a call per span on this hot loop; keep the two
                # in step.
                attrs: dict[str, object] = {}
                for kv in s.attributes:
                    v = kv.value
                    which = v.WhichOneof("value")
                    if which == "string_value":
                        attrs[kv.key] = v.string_value
                    elif which == "int_value":
                        attrs[kv.key] = v.int_value
                    elif which == "double_value":
                        attrs[kv.key] = v.double_value
                    elif which == "bool_value":
                        attrs[kv.key] = v.bool_value
                    elif which is not None:
                        attrs[kv.key] = any_value(v)
                start = s.start_time_unix_nano
                end = s.end_time_unix_nano
                if end < start:
                    end = start
                trace_hex = tid.hex()
                span_hex = sid.hex()
                name = s.name
                k = s.kind
                kind = kinds[k] if 0 <= k < 6 else "internal"
                st = s.status
                mapped = None
                if mapper is not None and "llmtrace.side" not in attrs and "llmtrace.stage" not in attrs:
                    mapped = mapper.map(name, kind, attrs, trace_hex, span_hex, start, end)
                if mapped is not None:
                    attrs = mapped.attributes
                    op_a(mapped.operation)
                    stage_a(mapped.stage)
                    phase_a(mapped.phase)
                else:
                    op_a(attrs.get("gen_ai.operation.name"))
                    stage_a(attrs.get("llmtrace.stage"))
                    phase_a(attrs.get("llmtrace.phase"))
                status = ("cancelled" if attrs.get("llmtrace.status") == "cancelled"
                          else "error" if st.code == 2 else "ok")
                pid = s.parent_span_id
                trace_a(trace_hex)
                span_a(span_hex)
                parent_a(pid.hex() if len(pid) == 8 and pid != _ZERO8 else None)
                name_a(name)
                kind_a(kind)
                service_a(service)
                dv = attrs.get("service.version", res_version)
                deploy = str(dv) if dv is not None else None
                deploy_a(deploy)
                start_a(start)
                end_a(end)
                dur_a((end - start) / 1e6)
                status_a(status)
                msg_a(st.message or None)
                attr_a(dumps(attrs))
                res_a(res_json)
                events = s.events
                ev_a(dumps([{"name": e.name, "ts": e.time_unix_nano, "attributes": attributes(e.attributes)}
                            for e in events]) if len(events) else None)
                if mapped is not None:
                    for row in mapped.extra:
                        trace_a(trace_hex)
                        span_a(row.span_id)
                        parent_a(span_hex)
                        name_a(row.stage)
                        kind_a("internal")
                        op_a(None)
                        stage_a(row.stage)
                        phase_a(row.phase)
                        service_a(service)
                        deploy_a(deploy)
                        start_a(row.start_ns)
                        end_a(row.end_ns)
                        dur_a((row.end_ns - row.start_ns) / 1e6)
                        status_a("ok")
                        msg_a(None)
                        attr_a(dumps(row.attributes))
                        res_a(res_json)
                        ev_a(None)
    try:
        table = pa.Table.from_pydict(cols, schema=ARROW_SCHEMA)
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise PayloadError(f"span values out of range: {exc}") from None
    return Decoded(table, received, rejected, reason)


def decode(body: bytes, content_type: str | None, content_encoding: str | None, *,
           max_bytes: int, mapper: Mapper | None = None) -> Decoded:
    """One HTTP body to one Arrow table (raises PayloadError / PayloadTooLarge)."""
    raw = decompress(body, content_encoding, max_bytes)
    return request_to_table(parse_request(raw, content_type), mapper)

