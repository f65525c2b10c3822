"""The join by response id (otlp_join.py) done on one request's rows before they are stored, where both
sides of a call came in the same OTLP request.

An app that traces its client calls and the engine that serves them often export through one collector
pipeline, so the client's pass span and the engine's land in one request body. Joining those in the store
costs UPDATEs that rewrite rows just inserted (and a scan of the recent rows for each); joined here, the rows
go in already joined and the store's join only records the move (for the engine's spans that arrive later)
and looks for spans of the engine's trace stored before. The rules are the store join's: keys compared
without an OpenAI prefix, the engine's whole trace under the latest-starting client pass naming its id, its
roots and its pass span made children of that pass, the marks on the engine's pass span. A pair already in
one trace (a traceparent joined it) is only marked done. Every pass span whose key met its other side here
carries ``llmtrace.join.key``, so the store join does not wait for it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from llmtrace.tracer.registry import names as N

# The engine's spellings of its request id, first present wins (otlp_join.SERVER_KEYS, the same order)
_SERVER = ("gen_ai.request.id", "rid", "request_id", "x_request_id", N.GEN_AI_RESPONSE_ID)
_PREFIXES = ("chatcmpl-", "cmpl-")
_ATTRIBUTES = 14  # the attributes JSON's place in a span row (storage/span_rows.ROW_FIELDS)
BY_RESPONSE_ID = "response_id"


@dataclass(frozen=True, slots=True)
class PassKey:
    """A pass span that names its call: the client's response id or the engine's request id."""

    side: str
    key: str
    trace: str
    span: str
    parent: str | None
    start: int
    row: int  # its place in the request's rows


def _text(value: object) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    text = value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return text or None


def pass_key(attrs: Mapping[str, object], trace: str, span: str, parent: str | None, start: int,
             row: int) -> PassKey | None:
    """The key a pass span names (None: it names none), as the store join reads it off the JSON."""
    side = attrs.get(N.SIDE)
    if side == "client":
        raw = _text(attrs.get(N.GEN_AI_RESPONSE_ID))
    elif side == "server":
        raw = None
        for k in _SERVER:
            raw = _text(attrs.get(k))
            if raw is not None:
                if k == "rid":  # SGLang's rid behind its worker's prefix
                    raw = raw.rsplit("_", 1)[-1] or None
                    if raw is None:
                        continue
                break
    else:
        return None
    if raw is None:
        return None
    for prefix in _PREFIXES:
        if raw.startswith(prefix):
            raw = raw[len(prefix):]
            break
    return PassKey(side, raw, trace, span, parent, start, row) if raw else None


@dataclass(slots=True)
class _Move:
    to_trace: str
    to_span: str
    engine: PassKey


def join_rows(rows: list[Any], keys: list[PassKey]) -> int:  # rows: storage/span_rows.SpanRow tuples
    """Join the request's pairs in its rows (replaced in place); returns the engine traces moved."""
    clients: dict[str, list[PassKey]] = {}
    for k in keys:
        if k.side == "client":
            clients.setdefault(k.key, []).append(k)
    if not clients:
        return 0
    moves: dict[str, _Move] = {}
    done: list[PassKey] = []
    for s in keys:
        if s.side != "server" or s.key not in clients:
            continue
        met = clients[s.key]
        done.append(s)
        done.extend(met)
        other = [c for c in met if c.trace != s.trace]
        if not other:
            continue  # one trace already: a traceparent joined them
        to = max(other, key=lambda c: c.start)  # the innermost client pass, nearest the wire
        m = moves.get(s.trace)
        if m is None or s.start < m.engine.start:
            moves[s.trace] = _Move(to.trace, to.span, s)
    for m in moves.values():  # a chain (a trace moved into one that moves too) ends at the last
        for _ in range(len(moves)):
            nxt = moves.get(m.to_trace)
            if nxt is None or nxt is m:
                break
            m.to_trace, m.to_span = nxt.to_trace, nxt.to_span
    marks = {k.row: k.key for k in done}
    for i, row in enumerate(rows):
        m = moves.get(row[0])
        key = marks.get(i)
        if m is None and key is None:
            continue
        attrs = str(row[_ATTRIBUTES])
        extra: dict[str, object] = {}
        if key is not None and f'"{N.JOIN_KEY}"' not in attrs:
            extra[N.JOIN_KEY] = key
        if m is not None and row[1] == m.engine.span:
            extra.update({N.JOIN_BY: BY_RESPONSE_ID, N.JOIN_TRACE_ID: row[0], N.JOIN_PARENT_SPAN_ID: m.engine.parent})
        if extra:
            attrs = _merged(attrs, extra)
        if m is None:
            rows[i] = (*row[:_ATTRIBUTES], attrs, *row[_ATTRIBUTES + 1:])
            continue
        parent = m.to_span if row[2] is None or row[1] == m.engine.span else row[2]
        rows[i] = (m.to_trace, row[1], parent, *row[3:_ATTRIBUTES], attrs, *row[_ATTRIBUTES + 1:])
    return len(moves)


def _merged(attrs_json: str, extra: dict[str, object]) -> str:
    """The attributes JSON with ``extra``'s keys added (spliced before the closing brace: no parse)."""
    tail = orjson.dumps(extra).decode()[1:-1]
    body = attrs_json.rstrip()
    if body == "{}":
        return "{" + tail + "}"
    return body[:-1] + "," + tail + "}"
