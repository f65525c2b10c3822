"""Running a set of analyzers at once, in threads, over forks of one Query.

Most of a ``diagnose`` run is DuckDB, which releases the GIL, but part of every query is single-threaded
(planning it, converting its rows to Python) and so is the analyzers' own Python: one query after another
leaves cores idle that the next query could use. Each thread takes the next analyzer from one list, over its
own cursor of the same database; the pass table is built once, by the first thread, while the others start on
the analyzers that do not read it. Findings come back in the analyzers' order, whatever order they finished in.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import duckdb

from llmtrace.analyzers.core.finding import Finding
from llmtrace.analyzers.core.query import Query

if TYPE_CHECKING:
    from llmtrace.analyzers.core.base import Analyzer

MAX_THREADS = 4  # past a few, threads only queue on the cores DuckDB's own threads already use


def default_threads(q: Query) -> int:
    """As many as the connection's DuckDB may use cores (its ``threads`` setting: what it detected, or what the
    user capped it at), up to MAX_THREADS."""
    return max(1, min(MAX_THREADS, _duckdb_threads(q)))


def _duckdb_threads(q: Query) -> int:
    if not isinstance(q.conn, duckdb.DuckDBPyConnection):  # (ClickHouse: one by one)
        return 1
    row = q.conn.execute("SELECT current_setting('threads')").fetchone()
    return int(row[0]) if row else 1


@contextlib.contextmanager
def _cores_shared(q: Query, running: int) -> Iterator[None]:
    """While ``running`` analyzers run at once, DuckDB's pool is shrunk by the threads they add. A database has
    one pool of ``threads`` workers, and the thread that runs a query works on it too (the pool starts
    ``threads`` - 1 of its own): n analyzers at once keep n - 1 more threads busy than there are cores, and
    the threads that wait for a core cost CPU and buy no time. At 100k passes on two cores, two analyzers at
    once took 3.29-3.41 CPU-seconds with two DuckDB threads and 3.17-3.20 with one, in the same 1.73-1.77 s.
    The setting is the database's, not the cursor's: it is put back when the run ends. A configuration that
    is locked keeps its setting."""
    cores = _duckdb_threads(q)
    share = max(1, cores - running + 1)
    if share >= cores:
        yield
        return
    try:
        q.conn.execute(f"SET threads = {share}")
    except duckdb.Error:
        yield
        return
    try:
        yield
    finally:
        q.conn.execute(f"SET threads = {cores}")


def analyze_all(q: Query, analyzers: Sequence[Analyzer], threads: int | None = None) -> list[list[Finding]]:
    """Each analyzer's findings over ``q``, in the order given: with ``threads`` > 1 (default:
    :func:`default_threads`) and a connection that can be shared (:meth:`Query.shareable`), several at once;
    else one by one on ``q`` itself. ``q`` stays the caller's to release."""
    n = min(default_threads(q) if threads is None else threads, len(analyzers))
    if n < 2 or not q.shareable():
        return [a.analyze(q.conn, q.since_ns, query=q) for a in analyzers]
    # the analyzers that never read the pass table go first: they fill the time the first thread builds it
    order = sorted(range(len(analyzers)), key=lambda i: analyzers[i].reads_passes)
    results: list[list[Finding] | None] = [None] * len(analyzers)
    todo = iter(order)
    take = threading.Lock()
    stop = threading.Event()
    forks: list[Query] = []
    try:
        views = q.temp_views()  # listed once for every fork
        for _ in range(n):
            forks.append(q.fork(views))

        def work(fork: Query, first: bool) -> None:
            if first and any(a.reads_passes for a in analyzers):
                fork.materialize()
            while not stop.is_set():
                with take:
                    i = next(todo, None)
                if i is None:
                    return
                try:
                    results[i] = analyzers[i].analyze(fork.conn, fork.since_ns, query=fork)
                except BaseException:
                    stop.set()  # the others finish the analyzer they are in and stop
                    raise

        with _cores_shared(q, n), ThreadPoolExecutor(max_workers=n, thread_name_prefix="llmtrace-analyzer") as pool:
            running = [pool.submit(work, f, k == 0) for k, f in enumerate(forks)]
            try:
                for r in running:
                    r.result()
            except BaseException:  # an analyzer failed, or Ctrl-C here: stop the queries still running
                stop.set()
                for f in forks:
                    f.conn.interrupt()
                raise
    finally:
        for f in forks:
            f.release()
    return [r if r is not None else [] for r in results]
