"""Retention: drop the oldest traces when the store is past a size or an age.

Whole traces go, never half a trace: a trace's age is the end of its last span. Size is DuckDB's own
count of used blocks (``PRAGMA database_size``), not the file length: DuckDB does not shrink a file, it
reuses the blocks freed when whole row groups (122,880 rows) are deleted, so with a cap the file stops
growing at about the cap. Deletes take the store 10% under the cap, so retention does not run on every
batch. Callable from the collector (periodically, inside its own short write transaction), from an app,
or by hand (``enforce(path, policy)``).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import duckdb

from llmtrace.tracer.storage.fetch import scalar
from llmtrace.tracer.storage.store import write_connection

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
               "tib": 1 << 40}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
HEADROOM = 0.9  # delete down to 90% of the cap
_META_KEPT = "retention.size_kept_spans"


def parse_size(text: str) -> int:
    """'500MB', '10GB', '1.5GiB', '123456' -> bytes (binary multiples)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"cannot read size {text!r}; write e.g. 500MB or 10GB")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '3600s', '2w' -> seconds."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*", text.lower())
    if not m:
        raise ValueError(f"cannot read age {text!r}; write e.g. 30d, 12h or 90m")
    value = float(m.group(1)) * _AGE_UNITS[m.group(2)]
    if value <= 0:
        raise ValueError(f"age must be positive, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    max_bytes: int | None = None
    max_age_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise ValueError("max_age_s must be positive")

    @property
    def active(self) -> bool:
        return self.max_bytes is not None or self.max_age_s is not None


@dataclass(frozen=True, slots=True)
class RetentionResult:
    deleted_spans: int = 0
    deleted_traces: int = 0
    used_bytes_before: int = 0
    reason: str = ""


def used_bytes(conn: duckdb.DuckDBPyConnection) -> int:
    """Bytes in use in the DuckDB file (blocks in use plus the write-ahead log)."""
    row = conn.execute(
        "SELECT block_size * used_blocks FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchone()
    wal = 0
    try:
        db = conn.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
        if db and db[0]:
            wal = os.path.getsize(db[0] + ".wal") if os.path.exists(db[0] + ".wal") else 0
    except Exception:  # the WAL is a refinement; the block count is what matters
        wal = 0
    return int(row[0] if row and row[0] is not None else 0) + wal


def _delete_traces_before(conn: duckdb.DuckDBPyConnection, cutoff_sql: str, params: list[object]) -> tuple[int, int]:
    c = conn
    c.execute(
        f"CREATE OR REPLACE TEMP TABLE _llmtrace_drop AS SELECT trace_id FROM spans GROUP BY trace_id HAVING {cutoff_sql}",
        params,
    )
    traces = scalar(c.execute("SELECT count(*) FROM _llmtrace_drop"))
    if not traces:
        c.execute("DROP TABLE _llmtrace_drop")
        return 0, 0
    spans = scalar(c.execute("DELETE FROM spans WHERE trace_id IN (SELECT trace_id FROM _llmtrace_drop)"))
    c.execute("DROP TABLE _llmtrace_drop")
    return int(spans), int(traces)


def apply_retention(conn: duckdb.DuckDBPyConnection, policy: RetentionPolicy, *, now_ns: int | None = None) -> RetentionResult:
    """Enforce ``policy`` on an open read-write connection (the caller keeps the transaction short)."""
    if not policy.active:
        return RetentionResult()
    now = time.time_ns() if now_ns is None else now_ns
    deleted_spans = deleted_traces = 0
    reasons: list[str] = []
    if policy.max_age_s is not None:
        cutoff = now - int(policy.max_age_s * 1e9)
        s, t = _delete_traces_before(conn, "max(end_ns) < ?", [cutoff])
        if t:
            reasons.append(f"{t} traces older than {policy.max_age_s:.0f}s")
        deleted_spans += s
        deleted_traces += t
    used = used_bytes(conn)
    if policy.max_bytes is not None and used > policy.max_bytes:
        total = scalar(conn.execute("SELECT count(*) FROM spans"))
        row = conn.execute("SELECT value FROM llmtrace_meta WHERE key = ?", [_META_KEPT]).fetchone()
        # Freed blocks show up only after DuckDB rewrites the row groups; until the store has grown past
        # what the last run kept, a still-high block count is that lag, not new data: do not cascade.
        if total and (row is None or total > int(row[0])):
            keep = int(total * policy.max_bytes * HEADROOM / used)
            s, t = _drop_oldest_keeping(conn, keep)
            conn.execute("INSERT OR REPLACE INTO llmtrace_meta VALUES (?, ?)", [_META_KEPT, str(total - s)])
            if t:
                reasons.append(f"{t} oldest traces to keep {used} bytes under {policy.max_bytes}")
            deleted_spans += s
            deleted_traces += t
    return RetentionResult(deleted_spans, deleted_traces, used, "; ".join(reasons))


def _drop_oldest_keeping(conn: duckdb.DuckDBPyConnection, keep_spans: int) -> tuple[int, int]:
    """Delete the oldest whole traces so that at most ``keep_spans`` spans remain."""
    return _delete_traces_before(
        conn,
        "max(end_ns) < coalesce((SELECT min(t_end) FROM ("
        "  SELECT t_end, sum(n) OVER (ORDER BY t_end DESC, trace_id DESC) AS newer"
        "  FROM (SELECT trace_id, max(end_ns) AS t_end, count(*) AS n FROM spans GROUP BY trace_id))"
        " WHERE newer <= ?), 9223372036854775807)",
        [keep_spans],
    )


def enforce(path: str | os.PathLike[str], policy: RetentionPolicy, *, lock_timeout_s: float = 30.0) -> RetentionResult:
    """Open the store briefly and apply the policy."""
    with write_connection(path, timeout_s=lock_timeout_s) as conn:
        return apply_retention(conn, policy)
