"""``llmtrace export --parquet DIR``: the store's spans as hive-partitioned Parquet (date=/service=), the
``passes`` view materialised beside them in ``DIR.passes`` (one row per pass, same partitions), and the stage
spans with their declared values as typed columns in ``DIR.stages`` (stage=/date=/service=). ``diagnose
--parquet 'DIR/**/*.parquet'`` reads the last two instead of building every pass from the spans' JSON.

    llmtrace export --parquet traces/ [--since 7d | --since 2026-11-01] [--db store.duckdb]
    llmtrace sql --parquet 'traces/**/*.parquet' "SELECT model, avg(ttft_ms) FROM requests GROUP BY 1"

Each file keeps the ``spans`` columns (``service`` included, so the files also read correctly without
hive partitioning) plus ``date``. The export runs in time slices of about two million spans, each
in its own short read connection, so a collector writing the same store is held up only briefly.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from llmtrace.tracer.cli.timewindow import parse_since
from llmtrace.tracer.settings import resolve_db
from llmtrace.tracer.storage.store import StoreError, bind_pass_table, passes_source, read_connection

_DATE_SQL = "strftime(make_timestamp(start_ns // 1000), '%Y-%m-%d')"
CHUNK_SPANS = 2_000_000  # spans per COPY (one short read connection each)
# Spans are written clustered by stage (pass spans and other non-stage spans first), then by time, in small
# row groups: a reader's `stage = '...'` / `operation IN (...)` filter skips the row groups whose min/max cannot
# match, so `diagnose --parquet` decodes the JSON of the stage it asks for only (a few percent of the files).
SPAN_ORDER = "stage NULLS FIRST, operation NULLS FIRST, start_ns"
ROW_GROUP_SPANS = 16_384


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--parquet", required=True, metavar="DIR", help="directory to write the Parquet files into")
    parser.add_argument("--db", help="store file (default $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--since", default=None,
                        help="only spans that started after this: an age (7d, 12h) or a date/time (2026-11-01)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="empty DIR first")
    mode.add_argument("--append", action="store_true", help="add files next to those already in DIR")


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def export_parquet(db: str | Path, out_dir: str | Path, *, since_ns: int | None = None, append: bool = False,
                   overwrite: bool = False) -> dict[str, int]:
    """Write the spans as DIR/date=YYYY-MM-DD/service=NAME/spans_<uuid>.parquet; returns counts."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory")
    if out.exists() and any(out.iterdir()) and not (overwrite or append):
        raise ValueError(f"{out} is not empty; pass --overwrite to replace it or --append to add files")
    where = "WHERE start_ns >= ?" if since_ns is not None else ""
    params: list[object] = [since_ns] if since_ns is not None else []
    # The store is read before DIR is touched: a bad store path leaves no empty DIR behind, and --overwrite
    # does not delete the last good export on the way to an error.
    with read_connection(db) as conn:
        days = conn.execute(
            f"SELECT {_DATE_SQL} AS d, count(*), min(start_ns), max(start_ns) FROM spans {where} GROUP BY d ORDER BY d",
            params).fetchall()
    if overwrite and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = 0
    for _day, n, lo, hi in days:
        for a, b in _slices(int(n), int(lo), int(hi)):
            with read_connection(db) as conn:
                conn.execute(
                    f"COPY (SELECT *, {_DATE_SQL} AS date FROM spans WHERE start_ns >= ? AND start_ns < ? "
                    f"ORDER BY {SPAN_ORDER}) TO {_quote(str(out))} (FORMAT parquet, COMPRESSION zstd, "
                    f"ROW_GROUP_SIZE {ROW_GROUP_SPANS}, PARTITION_BY (date, service), WRITE_PARTITION_COLUMNS true, "
                    "FILENAME_PATTERN 'spans_{uuid}', OVERWRITE_OR_IGNORE true)",
                    [a, b],
                )
        rows += int(n)
    return {"spans": rows, "days": len(days)}


def _slices(n: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """A big day goes in several time slices of about CHUNK_SPANS spans, so no single read holds the store
    for long: [a, b) start_ns ranges covering lo..hi."""
    slices = max(1, -(-n // CHUNK_SPANS))
    step = (hi - lo) // slices + 1
    return [(lo + k * step, min(lo + (k + 1) * step, hi + 1)) for k in range(slices)]


def _prepare(out: Path, append: bool, overwrite: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if overwrite:
            shutil.rmtree(out)
        elif not append:
            raise ValueError(f"{out} is not empty; pass --overwrite to replace it or --append to add files")
    out.mkdir(parents=True, exist_ok=True)


def stages_dir(out_dir: str | Path) -> Path:
    """Where the per-stage dataset of an export to ``out_dir`` goes: beside it, as DIR.passes does."""
    out = Path(out_dir)
    return out.parent / f"{out.name}.stages"


def export_stages(db: str | Path, out_dir: str | Path, *, since_ns: int | None = None, append: bool = False,
                  overwrite: bool = False) -> int:
    """The stage spans with their declared values as typed columns (tracer/storage/views.py
    ``stage_values_select``), DIR.stages/stage=ID/date=YYYY-MM-DD/service=NAME/stages_<uuid>.parquet; returns
    the row count. ``diagnose --parquet`` reads a stage's values from here (its own files, a few typed
    columns) instead of parsing every span's JSON. In time slices, as the spans are."""
    from llmtrace.tracer.registry.stages import is_stage
    from llmtrace.tracer.storage.views import stage_values_select

    out = stages_dir(out_dir)
    _prepare(out, append, overwrite)
    where = "AND start_ns >= ?" if since_ns is not None else ""
    params: list[object] = [since_ns] if since_ns is not None else []
    with read_connection(db) as conn:
        groups = conn.execute(
            f"SELECT stage, {_DATE_SQL} AS d, count(*), min(start_ns), max(start_ns) FROM spans "
            f"WHERE stage IS NOT NULL {where} GROUP BY ALL ORDER BY ALL", params).fetchall()
    rows = 0
    for stage, _day, n, lo, hi in groups:
        if not is_stage(stage):  # a name outside the registry has no declared columns; its spans stay in spans
            continue
        target = out / f"stage={stage}"  # one schema a stage: its own declared values
        for a, b in _slices(int(n), int(lo), int(hi)):
            rel = stage_values_select(stage, f"(SELECT * FROM spans WHERE start_ns >= {a} AND start_ns < {b})")
            with read_connection(db) as conn:
                conn.execute(
                    f"COPY (SELECT *, {_DATE_SQL} AS date FROM ({rel})) TO {_quote(str(target))} "
                    "(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (date, service), WRITE_PARTITION_COLUMNS true, "
                    "FILENAME_PATTERN 'stages_{uuid}', OVERWRITE_OR_IGNORE true)")
        rows += int(n)
    return rows


def passes_dir(out_dir: str | Path) -> Path:
    """Where the per-pass dataset of an export to ``out_dir`` goes: beside it (``traces`` -> ``traces.passes``),
    not inside, so the spans' glob ``traces/**/*.parquet`` never reads pass rows as spans."""
    out = Path(out_dir)
    return out.parent / f"{out.name}.passes"


def export_passes(db: str | Path, out_dir: str | Path, *, since_ns: int | None = None, append: bool = False,
                  overwrite: bool = False) -> int:
    """The ``passes`` view (one row per logical pass, docs/sql.md) materialised as its own hive-partitioned
    dataset, DIR.passes/date=YYYY-MM-DD/service=NAME/passes_<uuid>.parquet; returns the pass count.

    One read of the store: a pass joins its client and server spans, which a time slice could split."""
    out = passes_dir(out_dir)
    _prepare(out, append, overwrite)
    with read_connection(db) as conn:
        # the store's kept pass rows when its writer's stamp says they are current (a collector's store),
        # as diagnose reads them, else the passes built from the spans (passes_source)
        bind_pass_table(conn)
        rel = passes_source(conn, since_ns=since_ns)
        n = conn.execute(f"SELECT count(*) FROM {rel}").fetchone()
        if n and n[0]:
            conn.execute(
                f"COPY (SELECT *, strftime(ts, '%Y-%m-%d') AS date FROM {rel}) TO {_quote(str(out))} "
                "(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (date, service), WRITE_PARTITION_COLUMNS true, "
                "FILENAME_PATTERN 'passes_{uuid}', OVERWRITE_OR_IGNORE true)")
    return int(n[0]) if n else 0


def run(args: argparse.Namespace) -> int:
    db = resolve_db(args.db)
    try:
        since = parse_since(args.since) if args.since else None
        result = export_parquet(db, args.parquet, since_ns=since, append=args.append, overwrite=args.overwrite)
    except (ValueError, StoreError) as exc:
        print(f"llmtrace export: {exc}", file=sys.stderr)
        return 1
    print(f"exported {result['spans']} spans over {result['days']} day(s) to {args.parquet} "
          f"(read with: llmtrace sql --parquet '{Path(args.parquet) / '**' / '*.parquet'}' ...)")
    try:
        n = export_passes(db, args.parquet, since_ns=since, append=args.append, overwrite=args.overwrite)
    except (ValueError, StoreError) as exc:
        print(f"llmtrace export: {exc}", file=sys.stderr)
        return 1
    print(f"exported {n} passes (one row each) to {passes_dir(args.parquet)}")
    try:
        k = export_stages(db, args.parquet, since_ns=since, append=args.append, overwrite=args.overwrite)
    except (ValueError, StoreError) as exc:
        print(f"llmtrace export: {exc}", file=sys.stderr)
        return 1
    print(f"exported {k} stage spans (declared values as columns) to {stages_dir(args.parquet)}")
    return 0
