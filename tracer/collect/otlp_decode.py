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
from typing import Any

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from llmtrace.tracer.collect import scrub as scrub
from llmtrace.tracer.collect.otlp_join_body import PassKey, join_rows, pass_key
from llmtrace.tracer.collect.otlp_mapping import Mapper
from llmtrace.tracer.collect.otlp_sglang import link_in_body
from llmtrace.tracer.storage.span_rows import DEPLOY, SpanRow, json_text, rows_to_table, span_row
from llmtrace.tracer.storage.views import PASS_OPERATION_NAMES

_KINDS = ("internal", "internal", "server", "client", "producer", "consumer")  # index = OTLP SpanKind enum


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
    dropped_values: int = 0  # attribute values left out of stored spans (NaN, inf)
    open_traces: frozenset[str] = frozenset()  # SGLang request traces this request left unfinished


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


@dataclass(slots=True)
class Parsed:
    """A request and what was rejected while reading it (JSON bodies are read span by span)."""

    request: ExportTraceServiceRequest
    rejected: int = 0
    reason: str | None = None
    from_protobuf: bool = False


def parse_request(body: bytes, content_type: str | None) -> Parsed:
    ctype = (content_type or "application/x-protobuf").split(";")[0].strip().lower()
    req = ExportTraceServiceRequest()
    if ctype in ("application/x-protobuf", "application/protobuf", "application/octet-stream"):
        try:
            req.ParseFromString(body)
        except DecodeError as exc:
            raise PayloadError(f"malformed protobuf ExportTraceServiceRequest: {exc}") from None
        return Parsed(req, from_protobuf=True)
    if ctype == "application/json":
        return _parse_json(body)
    raise PayloadError(f"unsupported Content-Type {content_type!r} (use application/x-protobuf or application/json)")


def _json_int(text: str) -> object:
    # Python refuses int() of more than 4,300 digits (a ValueError out of json.loads); no OTLP field holds
    # one, so it becomes a value the field parser refuses: that span is rejected, not the request.
    return int(text) if len(text) <= 40 else "Infinity"


def _json_float(text: str) -> object:
    f = float(text)
    # protobuf's JSON parser refuses a bare inf; the quoted form parses and the attribute is then dropped
    return f if f - f == 0.0 else ("NaN" if f != f else "Infinity" if f > 0 else "-Infinity")


def _loads(body: bytes) -> object:
    try:
        return json.loads(body, parse_int=_json_int, parse_float=_json_float, parse_constant=lambda c: c)
    except RecursionError:
        raise PayloadError("malformed JSON: nested too deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise PayloadError(f"malformed JSON: {str(exc)[:200]}") from None


def _list(obj: dict[str, object], *keys: str) -> list[object]:
    for k in keys:
        v = obj.get(k)
        if v is not None:
            if not isinstance(v, list):
                raise PayloadError(f"JSON is not an OTLP ExportTraceServiceRequest: {k} must be a list")
            return v
    return []


def _parse_json(body: bytes) -> Parsed:
    """OTLP/JSON, span by span: one span that does not parse (bad hex id, out-of-range number, unpaired
    surrogate, nesting past protobuf's limit) is rejected and counted; the others are kept."""
    doc = _loads(body)
    if not isinstance(doc, dict):
        raise PayloadError("JSON body must be an object with resourceSpans")
    out = Parsed(ExportTraceServiceRequest())
    for rs in _list(doc, "resourceSpans", "resource_spans"):
        if not isinstance(rs, dict):
            raise PayloadError("JSON is not an OTLP ExportTraceServiceRequest: resourceSpans holds a non-object")
        scope_lists = _list(rs, "scopeSpans", "scope_spans")
        target = out.request.resource_spans.add()
        try:
            if rs.get("resource") is not None:
                json_format.ParseDict(rs["resource"], target.resource, ignore_unknown_fields=True)
        except (json_format.ParseError, AttributeError, TypeError, ValueError, RecursionError) as exc:
            n = sum(len(_list(ss, "spans")) for ss in scope_lists if isinstance(ss, dict))
            _reject(out, n, f"resource: {_first_line(exc)}")
            del out.request.resource_spans[-1]
            continue
        for ss in scope_lists:
            if not isinstance(ss, dict):
                raise PayloadError("JSON is not an OTLP ExportTraceServiceRequest: scopeSpans holds a non-object")
            scope = target.scope_spans.add()
            for span in _list(ss, "spans"):
                msg = scope.spans.add()
                try:
                    if not isinstance(span, dict):
                        raise TypeError("a span must be an object")
                    span = dict(span)
                    _hex_ids_to_b64(span)
                    links = span.get("links")
                    if isinstance(links, list):
                        span["links"] = [_hex_ids_to_b64(dict(lk)) if isinstance(lk, dict) else lk for lk in links]
                    json_format.ParseDict(span, msg, ignore_unknown_fields=True)
                except (json_format.ParseError, AttributeError, TypeError, ValueError, RecursionError) as exc:
                    del scope.spans[-1]
                    _reject(out, 1, _first_line(exc))
    return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _reject(out: Parsed, n: int, reason: str) -> None:
    out.rejected += n
    out.reason = out.reason or f"span rejected: {reason}"


def _hex_ids_to_b64(obj: dict[str, object]) -> dict[str, object]:
    # OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping expects base64.
    for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
        v = obj.get(key)
        if isinstance(v, str) and v:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(v)).decode()
            except ValueError:
                raise ValueError(f"{key} {v[:40]!r} is not hex") from None
    return obj


_DROP = object()  # a value that cannot be stored (a NaN or infinite double): the attribute is left out


def any_value(v: Any, drops: list[int] | None = None) -> object:  # v: an OTLP AnyValue (protobuf, untyped)
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "double_value":
        d = v.double_value
        if d - d == 0.0:  # finite: inf - inf and nan - nan are nan
            return d
        if drops is not None:
            drops[0] += 1
        return _DROP
    if which == "array_value":
        items = (any_value(x, drops) for x in v.array_value.values)
        return [x for x in items if x is not _DROP]
    if which == "kvlist_value":
        out: dict[str, object] = {}
        for kv in v.kvlist_value.values:
            x = any_value(kv.value, drops)
            if x is not _DROP:
                out[kv.key] = x
        return out
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, which)


def attributes(kvs: Any, drops: list[int] | None = None) -> dict[str, object]:  # repeated KeyValue
    """A resource's or a span's attributes; the common scalar kinds are read here, not in ``any_value``
    (this runs once per span on the collector's hot path)."""
    out: dict[str, object] = {}
    for kv in kvs:
        v = kv.value
        which = v.WhichOneof("value")
        if which == "string_value":
            out[kv.key] = v.string_value
        elif which == "int_value":
            out[kv.key] = v.int_value
        elif which == "double_value":
            d = v.double_value
            if d - d == 0.0:  # finite: inf - inf and nan - nan are nan
                out[kv.key] = d
            elif drops is not None:
                drops[0] += 1
        elif which == "bool_value":
            out[kv.key] = v.bool_value
        elif which is not None:
            x = any_value(v, drops)
            if x is not _DROP:
                out[kv.key] = x
    return out


_PASSES = frozenset(PASS_OPERATION_NAMES)
_ZERO16 = b"\0" * 16
_ZERO8 = b"\0" * 8
_MAX_NS = (1 << 63) - 1  # the store's BIGINT; OTLP's fixed64 goes past it


def request_to_table(req: ExportTraceServiceRequest, mapper: Mapper | None = None, *, rejected: int = 0,
                     reason: str | None = None, check_secrets: bool = True) -> Decoded:
    """Walk the request into the store's rows (``storage/span_rows``, the rows the in-app exporter makes
    of SDK spans too) and those into one Arrow table.

    A value that cannot be stored (a NaN or infinite number) is left out of its span's attributes and
    counted; a span that cannot be stored at all (bad ids, a time past the store's range, anything its
    mapping trips on) is rejected and counted, never the request. Every value of a span is computed
    before its rows are appended, so a span that fails midway leaves no partial row.

    This loop is the collector's hot path (a few microseconds a span): locals only, no per-span calls
    beyond what the protobuf runtime needs, ``attributes`` (one call, not one per value: 1.002-1.009x the
    inlined loop's CPU, 3000 spans of 20 values) and ``span_row`` (the row rules, shared with the exporter).
    """
    rows: list[SpanRow] = []
    append, extend, make_row = rows.append, rows.extend, span_row
    keys: list[PassKey] = []  # pass spans that name their call: both sides in this request are joined here
    passes = _PASSES
    received = rejected  # spans already rejected while parsing were in the request too
    drops = [0]
    dumps = json_text
    kinds = _KINDS
    suspect = scrub.suspect
    for rs in req.resource_spans:
        res_attrs = attributes(rs.resource.attributes, drops)
        res_json = dumps(res_attrs)
        if check_secrets and suspect(res_json):
            res_json = dumps(scrub.scrub_attributes(res_attrs))
        service = res_attrs.get("service.name")
        service = str(service) if service is not None else None
        res_version = res_attrs.get("service.version")
        res_version = str(res_version) if res_version is not None else None
        # the replica an engine's spans come from: its pod, instance or host (an engine's pass span names it)
        replica = res_attrs.get("k8s.pod.name") or res_attrs.get("service.instance.id") or res_attrs.get("host.name")
        replica = str(replica) if replica is not None else None
        for ss in rs.scope_spans:
            spans = ss.spans
            received += len(spans)
            for s in spans:
                tid = s.trace_id
                sid = s.span_id
                if len(tid) != 16 or len(sid) != 8 or tid == _ZERO16 or sid == _ZERO8:
                    rejected += 1
                    reason = reason or "span with an invalid trace_id or span_id (need 16 and 8 non-zero bytes)"
                    continue
                start = s.start_time_unix_nano
                end = s.end_time_unix_nano
                if start > _MAX_NS or end > _MAX_NS:
                    rejected += 1
                    reason = reason or "span with a timestamp past the year 2262"
                    continue
                try:
                    attrs = attributes(s.attributes, drops)
                    if end < start:
                        end = start
                    trace_hex = tid.hex()
                    span_hex = sid.hex()
                    name = s.name
                    k = s.kind
                    kind = kinds[k] if 0 <= k < 6 else "internal"
                    st = s.status
                    mapped = None
                    pid = s.parent_span_id
                    parent_hex = pid.hex() if len(pid) == 8 and pid != _ZERO8 else None
                    if mapper is not None and "llmtrace.side" not in attrs and "llmtrace.stage" not in attrs:
                        mapped = mapper.map(name, kind, attrs, trace_hex, span_hex, start, end, s.events,
                                            st.message if st.code == 2 else None, service=service,
                                            parent_hex=parent_hex, replica=replica)
                    labels = None
                    if mapped is not None:
                        attrs = mapped.attributes
                        labels = (mapped.operation, mapped.stage, mapped.phase)
                    attrs_json = dumps(attrs)
                    message = st.message or None
                    if check_secrets and (suspect(attrs_json) or (message and scrub.suspect(message))
                                          or scrub.suspect(name)):
                        # credentials in any capture mode: header attributes, api keys, bearer tokens
                        attrs_json = dumps(scrub.scrub_attributes(attrs))
                        message = scrub.scrub_text(message) if message else None
                        name = scrub.scrub_text(name)
                    events = s.events
                    events_json = None
                    if len(events):
                        events_json = dumps([{"name": e.name, "ts": e.time_unix_nano,
                                              "attributes": attributes(e.attributes, drops)} for e in events])
                        if check_secrets and suspect(events_json):
                            events_json = dumps(scrub.scrub_attributes(json.loads(events_json)))
                    first = make_row(trace_hex, span_hex, parent_hex,
                                     name, kind, attrs, service, res_version, start, end, st.code == 2, message,
                                     attrs_json, res_json, events_json, labels)
                    extra = []
                    if mapped is not None:  # the stage spans a mapping derives, children of this one
                        extra = [make_row(trace_hex, x.span_id, span_hex, x.stage, "internal", x.attributes, service,
                                          first[DEPLOY], x.start_ns, x.end_ns, False, None, dumps(x.attributes),
                                          res_json, None, (None, x.stage, x.phase)) for x in mapped.extra]
                except Exception as exc:  # noqa: BLE001 - one odd span is rejected, never the request
                    rejected += 1
                    reason = reason or f"span {s.name[:60]!r} rejected: {type(exc).__name__}: {str(exc)[:120]}"
                    continue
                if first[5] in passes:
                    k = pass_key(attrs, trace_hex, span_hex, parent_hex, start, len(rows))
                    if k is not None:
                        keys.append(k)
                append(first)
                if extra:
                    extend(extra)
    if len(keys) > 1:
        join_rows(rows, keys)  # client and engine pass spans of one call in this request (otlp_join_body.py)
    open_traces = link_in_body(rows, passes) if mapper is not None else set()  # SGLang's slices (otlp_sglang.py)
    try:
        table = rows_to_table(rows)  # a value a column cannot take is repaired in its span (and counted)
    except (pa.ArrowException, OverflowError, UnicodeError) as exc:
        raise PayloadError(f"span values out of range: {exc}") from None
    if drops[0]:
        note = f"{drops[0]} attribute value(s) dropped (NaN or infinite numbers cannot be stored)"
        reason = f"{reason}; {note}" if reason else note
    return Decoded(table, received, rejected, reason, drops[0], frozenset(open_traces))


def decode(body: bytes, content_type: str | None, content_encoding: str | None, *,
           max_bytes: int, mapper: Mapper | None = None) -> Decoded:
    """One HTTP body to one Arrow table (raises PayloadError / PayloadTooLarge)."""
    raw = decompress(body, content_encoding, max_bytes)
    parsed = parse_request(raw, content_type)
    # protobuf keeps keys and strings verbatim: one substring pass over the body says whether any span
    # can hold a credential (JSON may escape characters, so its spans are always looked at)
    check = not parsed.from_protobuf or scrub.suspect_protobuf(raw)
    return request_to_table(parsed.request, mapper, rejected=parsed.rejected, reason=parsed.reason,
                            check_secrets=check)

