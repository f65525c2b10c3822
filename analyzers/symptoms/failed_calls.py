"""Calls that failed: a pass that ended in error (an HTTP 4xx/5xx, a timeout, a refused connection, an exception in
the SDK's transport, a stream cut mid-way) is a call the app paid for in time and got nothing from. One finding per
kind of failure (analyzers/symptoms/failure_kinds.py), at the stage the kind belongs to, ranked by the share of calls that
failed; its evidence quotes the status, the error type and the (scrubbed) message.

Reads the ``passes`` view for which passes failed and how many there were, and the failed passes' own spans (both
sides: the client's status code, the server's failing stage) for what they say. Cancelled calls (the app stopped
reading) are not failures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, attr
from llmtrace.analyzers.symptoms.degrades_under_traffic import REFUSED_CAUSE
from llmtrace.analyzers.symptoms.failure_kinds import OVERLOADED, RATE, Failure, Kind, classify, http_status
from llmtrace.tracer.record.capture import scrub
from llmtrace.tracer.registry import semconv as sc
from llmtrace.tracer.registry.stages import stage_order
from llmtrace.tracer.storage.views import PASS_OPERATIONS

MAX_GROUPS = 500  # distinct (error type, status, message, failing stage) groups read; the rest are counted only
MESSAGE_CHARS = 300  # a message is quoted up to this long

_ORDER = stage_order()


def failure_severity(share: float) -> Severity:
    """A failed call is lost outright: 1 call in 5 failing is critical, 1 in 50 a warning."""
    return "critical" if share >= 0.2 else "warning" if share >= 0.02 else "info"


def clean_message(message: object) -> str:
    """A status message as it may be shown: scrubbed of anything that looks like a credential (older stores and
    foreign spans may hold one), on one line, cut to MESSAGE_CHARS."""
    text = " ".join(scrub(str(message or "")).split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


@dataclass(slots=True)
class _Group:
    """The failed calls of one kind at one stage."""

    kind: Kind
    stage: str
    calls: int = 0
    ms: float = 0.0
    messages: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    types: Counter[str] = field(default_factory=Counter)
    ids: list[str] = field(default_factory=list)


class FailedCalls(SymptomAnalyzer):
    symptom = "failed_calls"

    def find(self, q: Query) -> list[Finding]:
        tally = q.one(f"SELECT count(*) AS n, count(*) FILTER (WHERE status = 'error') AS failed FROM {q.passes}")
        n, failed = int(tally.get("n") or 0), int(tally.get("failed") or 0)
        if not failed:
            return []
        groups: dict[tuple[str, str], _Group] = {}
        for r in q.rows(self._sql(q)):
            named = [*(r["c_stages"] or ()), *(r["s_stages"] or ())]
            stages = tuple(sorted({s for s in named if s in _ORDER}, key=_ORDER.__getitem__))
            error_type = r["c_type"] or r["s_type"]
            status = http_status(r["c_code"]) or http_status(r["s_code"]) or http_status(error_type)
            # the server's message where it has one (it says why; the client's adds "HTTP 404: " to the same)
            message = r["s_msg"] or r["c_msg"]
            kind, stage = classify(Failure(error_type, status, message, stages))
            g = groups.setdefault((kind.id, stage), _Group(kind, stage))
            calls = int(r["n"])
            g.calls += calls
            g.ms += float(r["ms"] or 0.0)
            if message:
                g.messages[clean_message(message)] += calls
            if status is not None:
                g.statuses[str(status)] += calls
            if error_type and http_status(error_type) is None:
                g.types[clean_message(error_type)] += calls
            g.ids += [t for t in r["ids"] or () if t not in g.ids]
        return [self._finding(g, n) for g in groups.values()]

    def _sql(self, q: Query) -> str:
        def side(col: str) -> str:
            return (f"SELECT span_id, status_message AS msg, {attr(sc.ERROR_TYPE)} AS et, {attr(sc.HTTP_RESPONSE_STATUS_CODE)} AS code "
                    f"FROM {q.spans} WHERE operation IN {PASS_OPERATIONS} "
                    f"AND span_id IN (SELECT {col} FROM f WHERE {col} IS NOT NULL)")

        return f"""
            WITH f AS (SELECT trace_id, client_span_id, server_span_id, start_ns, duration_ms FROM {q.passes}
                       WHERE status = 'error'),
                 c AS ({side('client_span_id')}),
                 s AS ({side('server_span_id')}),
                 bad AS (SELECT parent_span_id, list(stage ORDER BY stage) AS stages FROM {q.spans}
                         WHERE status = 'error' AND stage IS NOT NULL
                           AND parent_span_id IN (SELECT client_span_id FROM f UNION ALL SELECT server_span_id FROM f)
                         GROUP BY parent_span_id)
            SELECT c.et AS c_type, c.code AS c_code, c.msg AS c_msg, s.et AS s_type, s.code AS s_code, s.msg AS s_msg,
                   cb.stages AS c_stages, sb.stages AS s_stages,
                   count(*) AS n, sum(f.duration_ms) AS ms,
                   (list(f.trace_id ORDER BY f.start_ns DESC))[1:5] AS ids
            FROM f LEFT JOIN c ON c.span_id = f.client_span_id LEFT JOIN s ON s.span_id = f.server_span_id
                   LEFT JOIN bad cb ON cb.parent_span_id = f.client_span_id
                   LEFT JOIN bad sb ON sb.parent_span_id = f.server_span_id
            GROUP BY ALL ORDER BY n DESC LIMIT {MAX_GROUPS}"""

    def _finding(self, g: _Group, n: int) -> Finding:
        share = g.calls / n
        ids = tuple(g.ids[:5])
        what = f"HTTP {', '.join(s for s, _ in g.statuses.most_common(3))}" if g.statuses else (
            ", ".join(t for t, _ in g.types.most_common(2)) or g.kind.id)
        top = g.messages.most_common(1)[0][0] if g.messages else ""
        evidence = [Evidence("calls failed", g.calls, f"of {n}", ids),
                    Evidence("error kind", g.kind.id, "", ids)]
        if g.statuses:
            evidence.append(Evidence("HTTP status", ", ".join(s for s, _ in g.statuses.most_common(3)), "", ids))
        if g.types:
            evidence.append(Evidence("error type", ", ".join(t for t, _ in g.types.most_common(3)), "", ids))
        for message, count in g.messages.most_common(3):
            evidence.append(Evidence("message", message, f"({count} calls)" if count > 1 else "", ids))
        evidence.append(Evidence("time spent on the failed calls", round(g.ms, 1), "ms", ids))
        refused = g.kind in (RATE, OVERLOADED) and g.stage == RATE.stage
        # refused for load reads as the traffic analyzer says it (the two merge: one cause, REFUSED_CAUSE)
        title = (f"{g.calls} of {n} calls were refused for load ({what})" if refused
                 else f"{g.calls} of {n} calls failed: {g.kind.title} ({what})")
        return self.finding(
            g.stage, failure_severity(share), title,
            g.kind.why + (f' Message: "{top}"' if top else ""),
            evidence, ids, g.kind.next_check, 0.5 + 0.5 * share,
            # refused for load: the same cause as the traffic analyzer's shed requests, merged into one finding
            cause=REFUSED_CAUSE if refused else f"failed:{g.kind.id}:{g.stage}",
            # no loss_ms: failures rank among themselves by the share that failed (Finding.sort_key), the time
            # they took is evidence
            affected_share=share,
        )
