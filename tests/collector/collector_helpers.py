"""Shared by the collector tests: the real ``llmtrace collect`` subprocess and stock OTLP senders."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


@dataclass
class RunningCollector:
    port: int
    db: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    token: str | None = None  # sent to /stats, which is behind the token when there is one

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stats(self) -> dict[str, object]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/stats")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def wait_written(self, rows: int, timeout_s: float = 30.0) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.stats()
            if int(s["rows_written"]) >= rows and int(s["rows_queued"]) == 0:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"collector wrote {s['rows_written']} of {rows} rows: {s}\n{self.log()}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)


def start_collector(tmp: Path, *args: str, db: Path | None = None, name: str = "collect", token: str | None = None,
                    env: dict[str, str] | None = None) -> RunningCollector:
    db = db or tmp / "collected.duckdb"
    log_path = tmp / f"{name}.log"
    if token is None and "--token" in args:
        token = args[args.index("--token") + 1]
    cmd = [sys.executable, "-m", "llmtrace.cli", "collect", "--db", str(db), "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/v1/traces", text)
        if m:
            return RunningCollector(int(m.group(1)), db, proc, log_path, token)
        if proc.poll() is not None:
            raise RuntimeError(f"llmtrace collect exited with {proc.returncode}:\n{text}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"llmtrace collect did not start:\n{log_path.read_text()}")


def otlp_provider(endpoint: str, service: str = "app", *, gzip: bool = False, headers: dict[str, str] | None = None,
                  **resource: str) -> TracerProvider:
    """A plain OpenTelemetry SDK set-up with the stock OTLP/HTTP exporter: what any app would run."""
    tp = TracerProvider(resource=Resource.create({"service.name": service, **resource}))
    exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=10,
                                compression=Compression.Gzip if gzip else Compression.NoCompression)
    tp.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=512, schedule_delay_millis=50))
    return tp


def query(db: Path, sql: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    """Read the store the way another process would: a short read-only connection."""
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        return conn.execute(sql, params or []).fetchall()


def count_spans(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM spans").fetchone()[0])
    finally:
        con.close()


FOREIGN_RUNNER = Path(__file__).resolve().parents[2] / "benchmarks" / "diagnosis_foreign.py"


@dataclass
class ForeignApp:
    """One service's traffic: ``calls`` (benchmarks/diagnosis_foreign.py's spec) made through ``app``'s
    instrumentation; ``content`` turns the package's own prompt-capture switch on."""
    app: str
    calls: list[dict[str, Any]]
    content: bool = True


def send_foreign(col: RunningCollector, tmp: Path, base_url: str, apps: dict[str, ForeignApp],
                 model: str = "tiny", timeout_s: float = 240) -> None:
    """Each service's app run at once, one process each (instrumentations patch the SDK module-wide), against
    ``base_url`` (the server's ``/v1``) and exporting to ``col``; returns when every call's span is written."""
    procs = {}
    for service, run in apps.items():
        spec = tmp / f"{service}.json"
        spec.write_text(json.dumps({"model": model, "calls": run.calls, "content": run.content}))
        procs[service] = subprocess.Popen([sys.executable, str(FOREIGN_RUNNER), run.app, str(spec), col.endpoint,
                                           base_url, service], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True)
    for service, p in procs.items():
        out, _ = p.communicate(timeout=timeout_s)
        assert p.returncode == 0 and f"sent {len(apps[service].calls)}" in out, (service, out[-3000:])
    col.wait_written(sum(len(run.calls) for run in apps.values()))


def diagnose_service(db: Path, service: str) -> list[dict[str, Any]]:
    """``llmtrace diagnose --json --service`` as a user runs it: a process of its own."""
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "diagnose", "--db", str(db), "--service", service,
                          "--json"], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout)["findings"])


def diagnose_services(db: Path, services: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each service's findings, four diagnose processes at a time (each spends most of its time starting up;
    they only read the store)."""
    with cf.ThreadPoolExecutor(4) as pool:
        return dict(zip(services, pool.map(lambda s: diagnose_service(db, s), services), strict=True))


def diagnose_foreign(tmp: Path, base_url: str, apps: dict[str, ForeignApp]) -> dict[str, list[dict[str, Any]]]:
    """The foreign apps run through a collector of their own (send_foreign), then each service diagnosed
    (diagnose_services); the collector is stopped whatever happens."""
    col = start_collector(tmp)
    try:
        send_foreign(col, tmp, base_url, apps)
        return diagnose_services(col.db, list(apps))
    finally:
        col.stop()
