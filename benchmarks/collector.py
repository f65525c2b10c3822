"""Benchmark `collector`: OTLP/HTTP ingest into the store, side by side with Arize Phoenix, and diagnose
over 1M passes in Parquet.

    python benchmarks/collector.py [--spans 600000] [--senders 4] [--phoenix-spans 40960]
                                   [--phoenix-python /tmp/phoenix-venv/bin/python] [--parquet-passes 1000000]

- ``collect_spans_per_s``: several sender processes POST pre-encoded OTLP/HTTP protobuf requests of 512 spans
  (llmtrace pass + stage spans) to a real ``llmtrace collect`` subprocess; the clock stops when the last
  span is committed in the DuckDB store (the collector's counter, then checked by reopening the store).
- ``phoenix_spans_per_s``: the same requests, the same senders, to a local ``phoenix serve`` (SQLite);
  counted in Phoenix's SQLite ``spans`` table until it stops growing. Phoenix is large, so it lives in its
  own virtualenv (``--phoenix-python``, default ``$PHOENIX_PYTHON`` or /tmp/phoenix-venv/bin/python);
  when it is missing the reason is recorded instead of a number.
- ``collect_kill9_*``: the same senders against a collector that is killed with SIGKILL mid-load; each
  sender records the requests that got a 200; a new collector on the store replays the write-ahead log;
  then every acknowledged span is looked up in the store (``collect_kill9_acked_lost`` must be 0).
- ``diagnose_parquet_s_1m``: ``benchmarks/synthetic_store.make_store`` (1M passes), ``llmtrace export
  --parquet``, then every analyzer over ``parquet_connection('DIR/**/*.parquet')``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _collector_shapes import engines_template_request, rows_per_body  # noqa: E402

from common import save  # noqa: E402

BATCH = 512
STAGE_IDS = ("arrival.admission", "intake.tokenization", "cache.prefix_match", "forward.prefill",
             "forward.decode", "gen.sampling", "gen.stop")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def template_request() -> bytes:
    """One OTLP request of 512 llmtrace spans (64 passes, each with 7 stage spans), as an app emits them."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from llmtrace.tracer import recording as rec

    exp = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "bench-app", "service.version": "v1"}))
    tp.add_span_processor(SimpleSpanProcessor(exp))
    rec.configure(tp.get_tracer("llmtrace"))
    for i in range(BATCH // (1 + len(STAGE_IDS))):
        t = rec.now_ns()
        p = rec.start_pass("smollm2-135m", side="server", start_ns=t, attributes={
            "gen_ai.usage.input_tokens": 400 + i, "gen_ai.usage.output_tokens": 32,
            "gen_ai.usage.cache_read.input_tokens": 256, "llmtrace.ttft_ms": 31.5, "llmtrace.tpot_ms": 4.2,
            "gen_ai.response.finish_reasons": ["stop"], "gen_ai.request.temperature": 0.7,
            "llmtrace.replica.id": "r0", "llmtrace.prompt.hash": f"{i:016x}"})
        for k, st in enumerate(STAGE_IDS):
            rec.record_stage(st, start_ns=t + k * 1000, end_ns=t + k * 1000 + 900, parent=p)
        p.end(end_ns=t + 50_000_000)
    rec.configure(None)
    spans = exp.get_finished_spans()
    assert len(spans) == BATCH, len(spans)
    return encode_spans(spans).SerializeToString()


JOIN_KEYS = frozenset({"gen_ai.response.id", "gen_ai.request.id", "rid"})  # ids both sides name: one a call


STEP_NS = 10_000_000  # each request's spans 10 ms after the previous one's: 512 spans a 10 ms is 51,200 a second


def make_bodies(template: bytes, count: int, offset: int) -> list[bytes]:
    """``count`` requests with distinct trace and span ids (batch number written into the ids), and distinct
    response and request ids (the batch number in front), so each client span meets its own engine span.
    Their times advance as live traffic's do (``STEP_NS`` a request), not all at the template's instant: the
    store's readers and the collector's join find recent rows by time (zone maps), which copies of one
    instant would defeat."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest.FromString(template)
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    orig = [(s.trace_id, s.span_id, s.parent_span_id, s.start_time_unix_nano, s.end_time_unix_nano) for s in spans]
    ids = [(kv, kv.value.string_value) for s in spans for kv in s.attributes if kv.key in JOIN_KEYS]
    bodies = []
    for b in range(offset, offset + count):
        tag = b.to_bytes(4, "big")
        for s, (tid, sid, pid, start, end) in zip(spans, orig):
            s.trace_id = tag + tid[4:]
            s.span_id = tag + sid[4:]
            if pid:
                s.parent_span_id = tag + pid[4:]
            s.start_time_unix_nano = start + b * STEP_NS
            s.end_time_unix_nano = end + b * STEP_NS
        for kv, value in ids:
            prefix = "chatcmpl-" if value.startswith("chatcmpl-") else ""
            kv.value.string_value = f"{prefix}{b:08x}{value[len(prefix):]}"
        bodies.append(req.SerializeToString())
    return bodies


def _sender(port: int, bodies: list[bytes], start: mp.Event, out: mp.Queue,  # type: ignore[type-arg]
            acked: mp.Queue | None = None, first: int = 0, step: int = 1) -> None:  # type: ignore[type-arg]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/x-protobuf"}
    refused = failed = 0
    start.wait()
    for k, body in enumerate(bodies):
        for _attempt in range(200 if acked is None else 3):
            try:
                conn.request("POST", "/v1/traces", body, headers)
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                time.sleep(0.05)
                continue
            if resp.status == 200:
                if acked is not None:
                    acked.put(first + k * step)  # the batch number: its ids carry it
                break
            if resp.status in (429, 503):  # back-pressure: wait as told, as the stock exporters do
                refused += 1
                time.sleep(float(resp.headers.get("Retry-After", "1")))
                continue
            failed += 1
            break
    conn.close()
    out.put((refused, failed))


def send_all(port: int, bodies: list[bytes], senders: int, progress: object, total: int,
             timeout_s: float) -> dict[str, float]:
    """Run the senders; ``progress()`` says how many spans are stored. Returns timing and counters."""
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_sender, args=(port, bodies[i::senders], start, out)) for i in range(senders)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    start.set()
    stored, last_change, last = 0, t0, -1
    sent_done_s = None
    deadline = t0 + timeout_s
    while time.perf_counter() < deadline:
        stored = progress()  # type: ignore[operator]
        now = time.perf_counter()
        if stored != last:
            last, last_change = stored, now
        if sent_done_s is None and not any(p.is_alive() for p in procs):
            sent_done_s = now - t0
        if stored >= total:
            break
        if sent_done_s is not None and now - last_change > 15:  # senders done and nothing moves: lost
            break
        time.sleep(0.02)
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    refused = failed = 0
    while not out.empty():
        r, f = out.get()
        refused, failed = refused + r, failed + f
    return {"seconds": last_change - t0, "stored": stored, "sent_s": sent_done_s or float("nan"),
            "refused": refused, "failed": failed}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_collector(bodies: list[bytes], senders: int, tmp: Path, env: dict[str, str] | None = None,
                    name: str = "collect", rows: int = BATCH, key: str = "collect",
                    python: str = sys.executable) -> dict[str, object]:
    """``rows``: what collect writes a request (its 512 spans and the stage rows it synthesizes); results
    named ``<key>_...``; ``python``: the environment whose llmtrace collects (collector_ab.py)."""
    db = tmp / f"{name}.duckdb"
    log = tmp / f"{name}.log"
    proc = subprocess.Popen([python, "-m", "llmtrace.cli", "collect", "--db", str(db), "--port", "0",
                             "--quiet"], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})},
                            cwd=None if python == sys.executable else tmp)  # not the checkout's llmtrace/
    port = None
    for _ in range(300):
        m = re.search(r"127\.0\.0\.1:(\d+)/v1/traces", log.read_text())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if port is None:
        proc.kill()
        raise RuntimeError(f"collector did not start: {log.read_text()}")

    def progress() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as r:
            return int(json.loads(r.read())["rows_written"])

    spans, total = len(bodies) * BATCH, len(bodies) * rows
    cpu0 = cpu_seconds(proc.pid)
    res = send_all(port, bodies, senders, progress, total, timeout_s=600)
    cpu = cpu_seconds(proc.pid) - cpu0
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        # the spans sent are the ones whose id starts with a batch number (make_bodies); the rows collect
        # synthesizes from a foreign span's numbers (named as their stage, mapped, ids of their own) are not,
        # and SGLang's link drops some of those
        in_store, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT span_id) FILTER (WHERE substr(span_id, 1, 8) < "
            f"'{len(bodies):08x}' AND NOT coalesce(name = stage AND contains(CAST(attributes AS VARCHAR), "
            "'\"llmtrace.mapped_from\"'), false)) FROM spans").fetchone()
        joined = _joined(conn)
    out = {
        # spans sent over the seconds until the last row was committed (rows: the spans and synthesized rows)
        f"{key}_spans_per_s": round(spans * res["stored"] / total / res["seconds"]),
        f"{key}_spans_sent": spans,
        f"{key}_spans_stored": int(in_store),
        f"{key}_spans_lost": spans - int(distinct),
        f"{key}_seconds": round(res["seconds"], 2),
        f"{key}_senders_done_s": round(res["sent_s"], 2),
        f"{key}_http_429_retries": int(res["refused"]),
        # CPU the collector process spent per span (decode + DuckDB writes), independent of other load
        f"{key}_cpu_us_per_span": round(cpu / spans * 1e6, 2),
        f"{key}_store_mb": round(db.stat().st_size / 2**20, 1),
        f"{key}_load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    if rows != BATCH:
        out[f"{key}_rows_per_request"] = rows
    if joined is not None:
        out[f"{key}_traces_joined_by_response_id"] = joined
    return out


def _joined(conn: object) -> int | None:
    """Engine pass spans collect put under their client's call by response id (None: no join table)."""
    try:
        return int(conn.execute("SELECT count(*) FROM spans WHERE json_exists(attributes, "  # type: ignore[attr-defined]
                                "'$.\"llmtrace.join.by\"')").fetchone()[0])
    except Exception:  # noqa: BLE001 - an older store
        return None


def bench_pass_table(bodies: list[bytes], senders: int, tmp: Path, rounds: int) -> dict[str, object]:
    """What keeping the per-pass table costs the collector (tracer/storage/pass_table.py): the same requests
    into a fresh store with the table kept and with LLMTRACE_PASS_TABLE=0, alternated ``rounds`` times in one
    run so both see the same load; the collector's CPU per span is the number that load does not move."""
    runs: dict[str, list[dict[str, object]]] = {"on": [], "off": []}
    for i in range(rounds):
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            env = {"LLMTRACE_PASS_TABLE": "1" if mode == "on" else "0"}
            runs[mode].append(bench_collector(bodies, senders, tmp, env=env, name=f"pt-{mode}-{i}"))
    out: dict[str, object] = {"pass_table_rounds": rounds, "pass_table_spans": len(bodies) * BATCH}
    for mode, rs in runs.items():
        out[f"pass_table_{mode}_spans_per_s"] = [r["collect_spans_per_s"] for r in rs]
        out[f"pass_table_{mode}_cpu_us_per_span"] = [r["collect_cpu_us_per_span"] for r in rs]
        out[f"pass_table_{mode}_lost"] = sum(int(str(r["collect_spans_lost"])) for r in rs)

    def total(mode: str, key: str) -> float:
        return sum(float(str(r[key])) for r in runs[mode])

    out["pass_table_cpu_cost_ratio"] = round(total("on", "collect_cpu_us_per_span") /
                                             total("off", "collect_cpu_us_per_span"), 3)
    out["pass_table_throughput_ratio"] = round(total("on", "collect_spans_per_s") / total("off", "collect_spans_per_s"), 3)
    out["pass_table_load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


def start_collect(db: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen([sys.executable, "-m", "llmtrace.cli", "collect", "--db", str(db), "--port", "0"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    for _ in range(600):
        m = re.search(r"127\.0\.0\.1:(\d+)/v1/traces", log.read_text())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"collector did not start: {log.read_text()}")


def bench_kill9(bodies: list[bytes], senders: int, tmp: Path, kill_after_s: float = 3.0,
                key: str = "collect_kill9") -> dict[str, object]:
    """Kill -9 mid-load; count the acknowledged spans that the store lacks after a restart."""
    db = tmp / f"{key}.duckdb"
    proc, port = start_collect(db, tmp / f"{key}.log")
    ctx = mp.get_context("fork")
    start, out, acked = ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_sender, args=(port, bodies[i::senders], start, out, acked, i, senders))
             for i in range(senders)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    start.set()
    time.sleep(kill_after_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    batches: set[int] = set()
    while True:
        try:
            batches.add(acked.get(timeout=0.5))
        except Exception:  # queue.Empty
            break
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        committed_at_kill = int(conn.execute("SELECT count(*) FROM spans").fetchone()[0])
    t = time.perf_counter()
    proc, _ = start_collect(db, tmp / f"{key}-restart.log")
    replay_s = time.perf_counter() - t
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    with read_connection(db) as conn:
        # the batch number is in the first 4 bytes of every id (make_bodies)
        stored = {int(tag, 16): int(n) for tag, n in conn.execute(
            "SELECT substr(span_id, 1, 8), count(DISTINCT span_id) FROM spans GROUP BY 1").fetchall()}
        total, distinct = conn.execute("SELECT count(*), count(DISTINCT span_id) FROM spans").fetchone()
        joined = _joined(conn)
    lost = sum(BATCH - stored.get(b, 0) for b in batches)
    out = {
        f"{key}_acked_spans": len(batches) * BATCH,
        f"{key}_committed_at_kill": committed_at_kill,
        f"{key}_stored_after_restart": int(total),
        f"{key}_acked_lost": lost,
        f"{key}_duplicates": int(total) - int(distinct),
        f"{key}_restart_s": round(replay_s, 2),
    }
    if joined is not None:
        out[f"{key}_traces_joined_by_response_id"] = joined
    return out


def bench_phoenix(bodies: list[bytes], senders: int, tmp: Path, python: str) -> dict[str, object]:
    if not Path(python).exists():
        return {"phoenix_note": f"Phoenix not run: no Python with arize-phoenix at {python} "
                                "(python -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix)"}
    work = tmp / "phoenix"
    work.mkdir()
    port, grpc = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = tmp / "phoenix.log"
    proc = subprocess.Popen([python, "-m", "phoenix.server.main", "serve"], env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                return {"phoenix_note": f"phoenix serve exited with {proc.returncode}: {log.read_text()[-400:]}"}
            time.sleep(0.5)
        else:
            return {"phoenix_note": "phoenix serve did not answer /healthz within 180 s"}
        dbfile = work / "phoenix.db"

        def progress() -> int:
            try:
                con = sqlite3.connect(f"file:{dbfile}?mode=ro", uri=True, timeout=10)
                try:
                    return int(con.execute("SELECT count(*) FROM spans").fetchone()[0])
                finally:
                    con.close()
            except sqlite3.Error:
                return 0

        total = len(bodies) * BATCH
        res = send_all(port, bodies, senders, progress, total, timeout_s=900)
        stored = progress()
        return {
            "phoenix_spans_per_s": round(stored / res["seconds"]) if res["seconds"] > 0 else 0,
            "phoenix_spans_sent": total,
            "phoenix_spans_stored": stored,
            "phoenix_spans_lost": total - stored,
            "phoenix_seconds": round(res["seconds"], 2),
        }
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def bench_diagnose_parquet(passes: int, tmp: Path) -> dict[str, object]:
    try:
        from synthetic_store import make_store

        from llmtrace.analyzers.diagnose.registry import ANALYZERS, run_analyzers
    except ImportError as exc:
        return {"diagnose_parquet_note": f"not measured: {exc}"}
    from llmtrace.tracer.cli.export import export_parquet
    from llmtrace.tracer.storage.store import parquet_connection

    db = tmp / "synthetic.duckdb"
    t = time.perf_counter()
    make_store(db, passes=passes, seed=0)
    make_s = time.perf_counter() - t
    out = tmp / "parquet"
    t = time.perf_counter()
    exported = export_parquet(db, out)
    export_s = time.perf_counter() - t
    db.unlink()
    size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
    t = time.perf_counter()
    conn = parquet_connection(str(out / "**" / "*.parquet"))
    findings = run_analyzers(conn)
    diag_s = time.perf_counter() - t
    key = "diagnose_parquet_s_1m" if passes == 1_000_000 else f"diagnose_parquet_s_{passes}"
    return {
        key: round(diag_s, 2),
        "diagnose_parquet_passes": passes,
        "diagnose_parquet_spans": exported["spans"],
        "diagnose_parquet_findings": len(findings),
        "diagnose_parquet_analyzers": len(ANALYZERS),
        "diagnose_parquet_gb": round(size / 2**30, 2),
        "parquet_export_s": round(export_s, 1),
        "synthetic_store_s": round(make_s, 1),
    }


def bench_engines(spans: int, senders: int, tmp: Path, kill9: bool) -> dict[str, object]:
    """The engines' and routers' shapes (vLLM V1, ARMS, llm-d, Dynamo, SGLang's request trace) with the apps'
    client spans collect joins to them by response id: ingest, then kill -9 mid-load."""
    bodies = make_bodies(engines_template_request(), max(1, spans // BATCH), 0)
    rows = rows_per_body(bodies[0])
    res: dict[str, object] = {"collect_engines_load_average_1m_at_start": round(os.getloadavg()[0], 2)}
    res.update(bench_collector(bodies, senders, tmp, name="engines", rows=rows, key="collect_engines"))
    if kill9:
        res.update(bench_kill9(bodies, senders, tmp, key="collect_engines_kill9"))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spans", type=int, default=614_400, help="spans sent to llmtrace collect (multiple of 512)")
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--phoenix-spans", type=int, default=40_960, help="spans sent to Phoenix (0 to skip)")
    ap.add_argument("--phoenix-python", default=os.environ.get("PHOENIX_PYTHON", "/tmp/phoenix-venv/bin/python"))
    ap.add_argument("--parquet-passes", type=int, default=1_000_000, help="passes for diagnose over Parquet (0 skips)")
    ap.add_argument("--no-kill9", dest="kill9", action="store_false", help="skip the kill -9 durability run")
    ap.add_argument("--pass-table-rounds", type=int, default=0,
                    help="only measure what keeping the per-pass table costs: this many on/off rounds (0: skip)")
    ap.add_argument("--shapes", choices=("both", "llmtrace", "engines"), default="both",
                    help="what the 512-span requests hold: llmtrace's own spans, engines' and routers' spans "
                         "that collect maps with the apps' client spans it joins to them by response id (ingest "
                         "only; results/collector_engines.json), or both, one after the other in one run "
                         "(collect_* and collect_engines_*, each with its kill -9 run)")
    args = ap.parse_args()
    if args.shapes == "engines":
        tmp = Path(tempfile.mkdtemp(prefix="llmtrace-bench-engines-"))
        try:
            bodies = make_bodies(engines_template_request(), max(1, args.spans // BATCH), 0)
            res = {"collect_batch_spans": BATCH, "collect_senders": args.senders, "shapes": "engines",
                   "load_average_1m_at_start": round(os.getloadavg()[0], 2),
                   **bench_collector(bodies, args.senders, tmp, rows=rows_per_body(bodies[0]))}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps(res), flush=True)
        save("collector_engines", res)  # its own file: collector.json keeps the llmtrace shapes' full run
        return
    if args.pass_table_rounds:
        tmp = Path(tempfile.mkdtemp(prefix="llmtrace-bench-passtable-"))
        try:
            bodies = make_bodies(template_request(), max(1, args.spans // BATCH), 0)
            res = bench_pass_table(bodies, args.senders, tmp, args.pass_table_rounds)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        save("collector_pass_table", res)  # its own file: collector.json keeps the full run's numbers and loads
        return
    tmp = Path(tempfile.mkdtemp(prefix="llmtrace-bench-collector-"))
    results: dict[str, object] = {"collect_batch_spans": BATCH, "collect_senders": args.senders,
                                  "load_average_1m_at_start": round(os.getloadavg()[0], 2)}
    try:
        template = template_request()
        n = max(1, args.spans // BATCH)
        bodies = make_bodies(template, n, 0)
        results["collect_request_kb"] = round(len(bodies[0]) / 1024, 1)
        if args.shapes != "engines":
            results.update(bench_collector(bodies, args.senders, tmp))
            print(json.dumps(results), flush=True)
            if args.kill9:
                results.update(bench_kill9(bodies, args.senders, tmp))
                print(json.dumps(results), flush=True)
        if args.shapes == "both":  # the engines' shapes in the same run: same machine, same load
            results.update(bench_engines(args.spans, args.senders, tmp, args.kill9))
            print(json.dumps(results), flush=True)
        if args.phoenix_spans:
            results.update(bench_phoenix(bodies[: max(1, args.phoenix_spans // BATCH)], args.senders, tmp,
                                         args.phoenix_python))
            if "phoenix_spans_per_s" in results and results["phoenix_spans_per_s"]:
                results["collect_vs_phoenix_x"] = round(
                    int(results["collect_spans_per_s"]) / int(results["phoenix_spans_per_s"]), 1)
            print(json.dumps(results), flush=True)
        if args.parquet_passes:
            results.update(bench_diagnose_parquet(args.parquet_passes, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # parts skipped this run (--phoenix-spans 0, --parquet-passes 0) keep their last recorded numbers
    previous_path = HERE / "results" / "collector.json"
    if previous_path.exists():
        previous = json.loads(previous_path.read_text())
        kept = {k: v for k, v in previous.items() if k not in results and k not in ("machine", "date")
                and (k.startswith("phoenix") and not args.phoenix_spans or k.startswith((
                    "diagnose_parquet", "parquet_export", "synthetic_store")) and not args.parquet_passes)}
        results.update(kept)
        if kept.get("phoenix_spans_per_s"):  # a kept Phoenix number is another run's: say so beside the ratio
            results["collect_vs_phoenix_x"] = round(int(str(results["collect_spans_per_s"])) /
                                                    int(str(kept["phoenix_spans_per_s"])), 1)
            results["collect_vs_phoenix_note"] = ("Phoenix not run in this run: its number is the kept one "
                                                  "(another run, another machine); the ratio uses it")
    save("collector", results)


if __name__ == "__main__":
    main()
