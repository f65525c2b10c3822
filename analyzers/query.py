"""SQL helpers every analyzer shares: the time window, typed boundary values out of the JSON attributes,
and rows as dicts. Analyzers read the store's documented views (``spans``, ``requests``) only, so they run
the same over a DuckDB file and over a Parquet export.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

_TYPES = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "str": "VARCHAR", "str[]": "VARCHAR[]"}

def struct_spec(values: dict[str, tuple[str, str]]) -> str:
    """A json_transform structure for (boundary-value name, type) pairs, quoted for SQL."""
    return json.dumps({n: _TYPES[t] for n, t in values.values()}).replace("'", "''")


def attr(name: str, typ: str = "str", column: str = "attributes") -> str:
    """SQL for one attribute of a span: ``typ`` is int, float, bool, str, or str[] for a list."""
    key = name.replace("'", "''")
    if typ == "str[]":
        return f"json_extract_string({column}, '$.\"{key}\"[*]')"
    text = f"json_extract_string({column}, '$.\"{key}\"')"
    if typ == "str":
        return text
    return f"TRY_CAST({text} AS {_TYPES[typ]})"


REQUEST_COLUMNS = ("trace_id, span_id, parent_span_id, service, deploy, start_ns, end_ns, duration_ms, status, "
                   "side, model, response_model, provider, replica, prompt_tokens, cached_tokens, hit_ratio, ttft_ms, "
                   "tpot_ms, output_tokens, finish_reason, temperature, top_p, seed, max_tokens, queue_wait_ms, "
                   "composition_hash, cost_usd, prompt_hash, output_hash")


@dataclass(slots=True)
class Query:
    """A connection plus the window the analyzers look at (``since_ns``: spans started at or after it).

    ``materialize()`` reads the ``requests`` view once into a temporary table that every analyzer of a
    run shares (the view parses each pass's JSON attributes; doing that once instead of per analyzer is
    most of what keeps ``diagnose`` fast on large stores). ``release()`` drops it.
    """

    conn: duckdb.DuckDBPyConnection
    since_ns: int | None = None
    _req_table: str | None = None

    @property
    def spans(self) -> str:
        return "spans" if self.since_ns is None else f"(SELECT * FROM spans WHERE start_ns >= {int(self.since_ns)})"

    @property
    def requests(self) -> str:
        """The passes, without the raw ``attributes`` column (read ``spans`` for those)."""
        if self._req_table is not None:
            return self._req_table
        where = "" if self.since_ns is None else f" WHERE start_ns >= {int(self.since_ns)}"
        return f"(SELECT {REQUEST_COLUMNS} FROM requests{where})"

    def materialize(self) -> None:
        if self._req_table is not None:
            return
        name = f"_llmtrace_requests_{id(self):x}"
        where = "" if self.since_ns is None else f" AND start_ns >= {int(self.since_ns)}"
        # The view parses each pass's attributes once (json_transform); keeping the rows in a temporary
        # table means a run of every analyzer pays for that parse once, not once per analyzer.
        self.conn.execute(f"""
            CREATE OR REPLACE TEMP TABLE {name} AS
            SELECT {REQUEST_COLUMNS} FROM requests WHERE true{where}""")
        self._req_table = name

    def release(self) -> None:
        if self._req_table is not None:
            try:
                self.conn.execute(f"DROP TABLE IF EXISTS {self._req_table}")
            finally:
                self._req_table = None

    def rows(self, sql: str, params: Sequence[object] | None = None) -> list[dict[str, object]]:
        cur = self.conn.execute(sql, list(params) if params else None)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=False)) for r in cur.fetchall()]

    def one(self, sql: str, params: Sequence[object] | None = None) -> dict[str, object]:
        rows = self.rows(sql, params)
        return rows[0] if rows else {}

    def stage(self, stage_id: str, values: dict[str, tuple[str, str]], where: str = "",
              extra: str = "") -> list[dict[str, object]]:
        """Rows of one stage's spans: trace/span/parent ids, start, duration, deploy, plus ``values``
        (alias -> (boundary-value name, type)); ``where`` filters on those aliases."""
        sql = f"SELECT * FROM {self.stage_sql(stage_id, values, extra)} {('WHERE ' + where) if where else ''}"
        return self.rows(sql)

    def flagged(self, stage_id: str, values: dict[str, tuple[str, str]], where: str,
                aggs: str = "") -> tuple[dict[str, object], tuple[str, ...]] | None:
        """The "count the flagged spans, quote a few" check many analyzers make: over a stage's spans that
        match ``where``, one row with ``n`` and the ``aggs`` (SQL select items over the ``values`` aliases),
        and up to five of their trace ids; None when no span matches."""
        row = self.one(f"SELECT count(*) AS n{', ' + aggs if aggs else ''}, (list(trace_id))[1:5] AS ids "
                       f"FROM {self.stage_sql(stage_id, values)} WHERE {where}")
        if not row.get("n"):
            return None
        return row, tuple(row.pop("ids"))  # type: ignore[call-overload]

    def count(self, stage_id: str) -> int:
        """How many spans of a stage are in the window."""
        row = self.conn.execute(f"SELECT count(*) FROM {self.spans} WHERE stage = '{stage_id}'").fetchone()
        return int(row[0]) if row else 0

    def stage_sql(self, stage_id: str, values: dict[str, tuple[str, str]], extra: str = "") -> str:
        """The same relation as :meth:`stage`, as SQL to build on. Each span's JSON is parsed once."""
        cols = ", ".join(f'v."{n}" AS {alias}' for alias, (n, _) in values.items())
        return (f"(SELECT trace_id, span_id, parent_span_id, start_ns, duration_ms, deploy, service"
                f"{', ' + cols if cols else ''} FROM (SELECT *, TRY(json_transform(attributes, '{struct_spec(values)}')) AS v "
                f"FROM {self.spans} WHERE stage = '{stage_id}'{' ' + extra if extra else ''}))")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank-with-interpolation percentile of a small list (q in 0..1); None when empty."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def sample_ids(ids: Sequence[object], n: int = 5) -> tuple[str, ...]:
    """A few distinct trace ids, in the order given, for evidence."""
    out: list[str] = []
    for i in ids:
        if i is not None and str(i) not in out:
            out.append(str(i))
            if len(out) >= n:
                break
    return tuple(out)


def pass_side(q: Query, column: str = "ttft_ms") -> str | None:
    """The side whose pass spans carry ``column``: the server when it reports it (it sees the engine),
    else the client, else the app. None when no pass has it."""
    rows = q.rows(f"""SELECT side, count(*) AS n FROM {q.requests} WHERE {column} IS NOT NULL GROUP BY side""")
    have = {str(r["side"]): int(r["n"]) for r in rows}  # type: ignore[call-overload]
    for side in ("server", "client", "app", "None"):
        if have.get(side):
            return side
    return None


def side_filter(side: str | None) -> str:
    if side is None or side == "None":
        return "side IS NULL"
    return f"side = '{side}'"

