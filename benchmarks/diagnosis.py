"""Benchmark `diagnosis`: how often `llmtrace diagnose` names the planted cause, and how often it raises an
alarm on the same app with the cause removed (its clean twin).

Public faces only: `llmtrace serve` processes started with flags (each writes the server's spans to its own
store), the official OpenAI and Anthropic SDKs wrapped by `llmtrace.adapters.middleware.instrument()` in this process
(each run traced as its own service into the server's store), foreign instrumentations in apps of their own
exporting through the stock OTLP exporter to `llmtrace collect` (one per capture mode, its own store: only
what those packages recorded), and `llmtrace diagnose --service NAME --json` as a subprocess. The cases are
in benchmarks/diagnosis_corpus.py and benchmarks/diagnosis_foreign_corpus.py.

    python benchmarks/diagnosis.py [--only CASE ...] [--keep DIR]
    python benchmarks/diagnosis.py --shard 1/2 --keep A --no-save & python benchmarks/diagnosis.py --shard 2/2 --keep B --no-save
    python benchmarks/diagnosis.py --merge A B      # one results file from the shards' rows (each DIR/rows.json)

Scores: top1 (the first finding's stage is one the case names), any (some finding names it), false alarm
(a twin got a finding above `info`). Writes benchmarks/results/diagnosis.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diagnosis_corpus import CASES, Case, Ctx  # noqa: E402
from diagnosis_corpus_ends import ENDS_SERVERS  # noqa: E402
from diagnosis_corpus_harm import HARM_SERVERS  # noqa: E402
from diagnosis_corpus_variants import VARIANT_SERVERS  # noqa: E402
from diagnosis_engines import ENGINE_CASES, N_REQUESTS, emit_case  # noqa: E402
from diagnosis_foreign_corpus import FOREIGN_CASES  # noqa: E402

TEMPLATE = """{%- for m in messages -%}<<{{ m['role'] }}>> {{ m['content'] }}
{% endfor -%}{%- if add_generation_prompt -%}<<assistant>> {% endif -%}"""

# server flag sets (the model is the tiny test model everywhere, so a run takes seconds on two cores)
SERVERS: dict[str, list[str]] = {
    "default": [],
    "round_robin": ["--replicas", "3", "--routing", "round_robin"],
    "prefix_aware": ["--replicas", "3", "--routing", "prefix_aware"],
    "small_pool": ["--num-blocks", "40"],
    "one_slot": ["--max-running", "1"],
    "speculative": ["--speculative", "ngram"],
    "invariant": ["--batch-invariant"],
    "foreign_template": ["--chat-template", "{template}"],
    "tiny_queue": ["--max-running", "1", "--max-queued", "1"],
    "moderated": ["--moderation-words", "refund,compensation", "--moderation-every-tokens", "6"],
    "no_holdback": ["--detokenizer-holdback", "off"],
    "short_stop_window": ["--stop-holdback", "1"],
    "short_default": ["--default-max-tokens", "10"],
    "conn_limit": ["--limit-concurrency", "3"],
    "one_seq": ["--max-num-seqs", "1"],
    # the bundled SmolLM2-135M: the tiny model's answers never vary, so causes of different answers need it
    "smol": ["--model", "default"],
    "smol_invariant": ["--model", "default", "--batch-invariant"],
    "smol_speculative": ["--model", "default", "--speculative", "draft"],
}
SERVERS.update(VARIANT_SERVERS)  # flag sets of diagnosis_corpus_variants.py
SERVERS.update(HARM_SERVERS)  # issue 35's loops, harm and mechanism cases: diagnosis_corpus_harm.py
SERVERS.update(ENDS_SERVERS)  # and of diagnosis_corpus_ends.py
LLMTRACE = [sys.executable, "-m", "llmtrace.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One `llmtrace serve --model tiny` process with its own store (or the model `--model-all` names)."""

    def __init__(self, name: str, workdir: Path, model_all: str | None = None) -> None:
        self.name = name
        self.db = workdir / f"{name}.duckdb"
        self.port = _free_port()
        template = workdir / "foreign.jinja"
        template.write_text(TEMPLATE)
        flags = [f.replace("{template}", str(template)) for f in SERVERS[name]]
        if model_all is not None:  # every server on one model: drop the set's own --model, keep its other flags
            i = flags.index("--model") if "--model" in flags else -1
            flags = ([] if model_all == "default" else ["--model", model_all]) + \
                (flags[:i] + flags[i + 2:] if i >= 0 else flags)
        model = ["--model", "tiny"] if "--model" not in flags and model_all is None else []
        if flags[:2] == ["--model", "default"]:
            flags = flags[2:]  # no --model: serve's bundled model
        self.proc = subprocess.Popen(
            [*LLMTRACE, "serve", *model, "--port", str(self.port), "--db", str(self.db),
             "--log-level", "warning", *flags],
            stdout=subprocess.DEVNULL, stderr=open(workdir / f"{name}.log", "wb"))  # noqa: SIM115
        self.url = f"http://127.0.0.1:{self.port}"

    def wait(self, timeout_s: float = 180.0) -> Server:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llmtrace serve ({self.name}) exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"llmtrace serve ({self.name}) did not come up in {timeout_s:.0f}s")

    def model(self) -> str:
        with urllib.request.urlopen(self.url + "/v1/models", timeout=5) as r:
            return str(json.loads(r.read())["data"][0]["id"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _wait_for_server_spans(db: Path, service: str, timeout_s: float = 30.0) -> int:
    """The server flushes its spans on its own schedule: wait until every pass the app made has the
    server's side too (or the timeout), so diagnose sees whole passes."""
    from llmtrace.tracer.storage.store import StoreError, read_connection

    deadline = time.monotonic() + timeout_s
    n_client = n_joined = 0
    while time.monotonic() < deadline:
        try:
            with read_connection(db, timeout_s=5) as conn:
                n_client, n_joined = conn.execute(
                    """SELECT count(*), count(*) FILTER (WHERE observed_by = 'both') FROM passes
                       WHERE service = ?""", [service]).fetchone()  # type: ignore[misc]
        except (StoreError, Exception):  # noqa: BLE001  (the view may not exist before the first write)
            pass
        if n_client and n_joined >= n_client:
            return int(n_joined)
        time.sleep(0.25)
    return int(n_joined)


class Collector:
    """One `llmtrace collect` process (its own store, one capture mode) for the foreign cases."""

    def __init__(self, capture: str, workdir: Path) -> None:
        self.db = workdir / f"collected-{capture}.duckdb"
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [*LLMTRACE, "collect", "--db", str(self.db), "--port", str(self.port), "--capture", capture, "--quiet"],
            stdout=subprocess.DEVNULL, stderr=open(workdir / f"collect-{capture}.log", "wb"))  # noqa: SIM115
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/traces"

    def wait(self, timeout_s: float = 60.0) -> Collector:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llmtrace collect exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("llmtrace collect did not come up")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _run_foreign(case: Case, srv: Server, col: Collector, service: str, twin: bool, work: Path) -> float:
    """The case's calls in an app of their own under the case's instrumentation (diagnosis_foreign.py)."""
    import random

    assert case.calls is not None and case.via is not None
    spec = work / f"{service}.calls.json"
    spec.write_text(json.dumps({"model": srv.model(), "calls": case.calls(twin, random.Random(service)),
                                "content": case.content}))
    t = time.perf_counter()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "diagnosis_foreign.py"), case.via,
                          str(spec), col.endpoint, srv.url + "/v1", service], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{service}: the {case.via} app failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - t


def _wait_for_foreign_passes(db: Path, service: str, n: int, timeout_s: float = 30.0) -> int:
    """The collector writes on its own schedule: wait until every call the app made is a pass."""
    from llmtrace.tracer.storage.store import read_connection

    deadline = time.monotonic() + timeout_s
    got = 0
    while time.monotonic() < deadline:
        try:
            with read_connection(db, timeout_s=5) as conn:
                got = int(conn.execute("SELECT count(*) FROM passes WHERE service = ?", [service]).fetchone()[0])  # type: ignore[index]
        except Exception:  # noqa: BLE001  (the views exist after the first write)
            got = 0
        if got >= n:
            break
        time.sleep(0.25)
    return got


def _run_app(case: Case, srv: Server, service: str, twin: bool) -> float:
    import anthropic
    import openai

    import llmtrace
    from llmtrace.adapters import instrument

    llmtrace.init(db=srv.db, service_name=service, capture=case.capture)
    t = time.perf_counter()
    try:
        def deploy(name: str) -> None:  # the same service, traced as another deploy from here on
            llmtrace.shutdown()
            llmtrace.init(db=srv.db, service_name=service, capture=case.capture, deploy=name)

        ctx = Ctx(instrument(openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)),
                  instrument(anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)), srv.model(),
                  deploy=deploy)
        case.run(ctx, twin)
    finally:
        llmtrace.shutdown()
    return time.perf_counter() - t


def _diagnose(db: Path, service: str, tries: int = 2) -> dict[str, Any]:
    for attempt in range(tries):
        out = subprocess.run([*LLMTRACE, "diagnose", "--db", str(db), "--service", service, "--json"],
                             capture_output=True, text=True, timeout=300)
        if out.returncode == 0:
            return json.loads(out.stdout)
        if attempt + 1 < tries:  # a store busy with a writer, a checkout mid-edit: once more, then it counts
            time.sleep(5)
    return {"error": out.stderr.strip()[-400:], "findings": []}


def _score(case: Case, twin: bool, result: dict[str, Any]) -> dict[str, Any]:
    found = result.get("findings", [])
    top = found[0] if found else None

    def names(f: dict[str, Any]) -> bool:
        return f["stage"] in case.expect or any(s in case.expect for s in f.get("stages", ()))

    row: dict[str, Any] = {
        "case": case.id, "run": "twin" if twin else "cause", "expect": list(case.expect),
        "top": None if top is None else {"stage": top["stage"], "severity": top["severity"], "title": top["title"]},
        "findings": [(f["severity"], f["stage"]) for f in found[:6]],
    }
    if case.via:
        row["via"] = case.via  # spans from this instrumentation, through llmtrace collect
    if "error" in result:
        row["error"] = result["error"]
    if twin:
        row["false_alarm"] = any(f["severity"] != "info" for f in found)
    else:
        row["top1"] = top is not None and top["stage"] in case.expect
        row["any"] = any(names(f) for f in found)
    return row


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    ap.add_argument("--keep", help="keep the stores in this directory")
    ap.add_argument("--no-save", action="store_true", help="print, do not write results/diagnosis.json")
    ap.add_argument("--real-model", action="store_true",
                    help="also run the cases that need the bundled SmolLM2-135M (slow on two cores)")
    ap.add_argument("--model-all", metavar="MODEL",
                    help="every server serves MODEL ('default': serve's bundled SmolLM2-135M) instead of tiny, "
                         "each keeping its other flags; runs the cases that need the bundled model too")
    ap.add_argument("--rediagnose", action="store_true",
                    help="with --keep DIR of an earlier run: diagnose its stores again without making calls")
    ap.add_argument("--shard", metavar="K/N", help="run every N-th case starting at the K-th (1-based), engines too: "
                    "shards run side by side each with its own --keep DIR, and --merge scores them as one run")
    ap.add_argument("--merge", nargs="+", metavar="DIR", help="score the rows the shards wrote (DIR/rows.json) as one "
                    "run and save the results; no calls")
    return ap.parse_args()


Pending = list[tuple[Case, bool, "cf.Future[dict[str, Any]]"]]


@dataclass
class _Run:
    """One run's processes: the servers by flag set, the collectors by capture mode, and the diagnoses queued."""

    args: argparse.Namespace
    work: Path
    pool: cf.ThreadPoolExecutor
    servers: dict[str, Server] = field(default_factory=dict)
    collectors: dict[str, Collector] = field(default_factory=dict)
    pending: Pending = field(default_factory=list)

    def collector(self, capture: str) -> Collector:
        if capture not in self.collectors:
            self.collectors[capture] = Collector(capture, self.work).wait()
        return self.collectors[capture]

    def case(self, case: Case, twin: bool) -> None:
        """The case's (or its twin's) calls, then its diagnosis queued."""
        name = (case.twin_server or case.server) if twin else case.server
        service = f"{case.id}-{'twin' if twin else 'cause'}"
        if self.args.rediagnose:
            db = self.work / (f"collected-{case.capture}.duckdb" if case.via else f"{name}.duckdb")
            self.pending.append((case, twin, self.pool.submit(_diagnose, db, service)))
            return
        if name not in self.servers:
            self.servers[name] = Server(name, self.work, self.args.model_all).wait()
        srv = self.servers[name]
        if case.via:
            col = self.collector(case.capture)
            app_s = _run_foreign(case, srv, col, service, twin, self.work)
            n = _wait_for_foreign_passes(col.db, service, len(json.loads(
                (self.work / f"{service}.calls.json").read_text())["calls"]))
            print(f"{service:<44} app {app_s:5.1f}s  passes {n} ({case.via})", flush=True)
            self.pending.append((case, twin, self.pool.submit(_diagnose, col.db, service)))
            return
        app_s = _run_app(case, srv, service, twin)
        joined = _wait_for_server_spans(srv.db, service)
        print(f"{service:<44} app {app_s:5.1f}s  passes {joined}", flush=True)
        self.pending.append((case, twin, self.pool.submit(_diagnose, srv.db, service)))

    def engine(self, ecase: Any, twin: bool) -> None:
        """Engines' and routers' own spans (benchmarks/diagnosis_engines.py): no server, the hashes collector."""
        db = self.work / "collected-hashes.duckdb"
        service = f"{ecase.id}-{'twin' if twin else 'cause'}"
        if not self.args.rediagnose:
            n = emit_case(ecase, self.collector("hashes").endpoint, service, twin, time.time_ns() - 3_600 * 10**9)
            got = _wait_for_foreign_passes(db, service, N_REQUESTS)
            time.sleep(1.0)  # the stage rows of the last batch follow its passes
            print(f"{service:<44} rows {n}  passes {got} ({ecase.via})", flush=True)
        self.pending.append((ecase, twin, self.pool.submit(_diagnose, db, service)))

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()
        for col in self.collectors.values():
            col.stop()


def main() -> None:
    args = _args()
    if args.merge:
        _finish(_merge(args.merge), args, None)
        return
    cases = [c for c in CASES + FOREIGN_CASES
             if (not args.only or c.id in args.only) and (args.real_model or args.model_all or c.model == "tiny")]
    engine_cases = [c for c in ENGINE_CASES if not args.only or c.id in args.only]
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        cases, engine_cases = cases[k - 1::n], engine_cases[k - 1::n]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="llmtrace-diagnosis-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LLMTRACE_STRICT", "0")
    if args.model_all:
        # the servers inherit it: on a busy 2-core box torch's two OpenMP threads spin-wait for each other, and
        # the bundled model ran some 2.5 s a token with two (0.5 s with one; tests/conftest.py does the same)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    run = _Run(args, work, cf.ThreadPoolExecutor(max_workers=2))  # diagnose the last run while the next one runs
    try:
        # a server is stopped after the last case that uses it (each holds a model and a KV pool: a shard's
        # thirty-odd flag sets alive at once ran a 23 GB machine short beside the other engineers' work)
        last_use = {n: i for i, c in enumerate(cases) for n in (c.server, c.twin_server or c.server)}
        for i_case, case in enumerate(cases):
            for name in [n for n in run.servers if last_use.get(n, -1) < i_case]:
                run.servers.pop(name).stop()
            for twin in (False, True):
                run.case(case, twin)
        for ecase in engine_cases:
            for twin in (False, True):
                run.engine(ecase, twin)
        rows = [_score(case, twin, fut.result()) for case, twin, fut in run.pending]
    finally:
        run.pool.shutdown(wait=True)
        run.stop()
    results = _summary(rows, time.perf_counter() - t0, args.model_all)
    run_file = work / "run.json"  # the run that made the stores (a --rediagnose only re-reads them)
    if not args.rediagnose:
        run_file.write_text(json.dumps({"calls_and_diagnose_wall_s": results["wall_s"],
                                        "load_average_1m": results["load_average_1m"]}))
    elif run_file.exists():
        results["stores_made_by"] = json.loads(run_file.read_text())
        results["rediagnosed"] = True
    # the rows and how they were made, for --merge (a shard's, or a whole run's)
    (work / "rows.json").write_text(json.dumps({"rows": rows, "wall_s": results["wall_s"], "shard": args.shard,
                                                "load_average_1m": results["load_average_1m"],
                                                "rediagnosed": bool(args.rediagnose)}))
    _finish(results, args, work)


def _summary(rows: list[dict[str, Any]], wall_s: float, model_all: str | None) -> dict[str, Any]:
    causes = [r for r in rows if r["run"] == "cause"]
    twins = [r for r in rows if r["run"] == "twin"]
    foreign = [r for r in causes if "via" in r]
    return {
        "cases": len(causes),
        "top1_accuracy": round(sum(r["top1"] for r in causes) / max(1, len(causes)), 3),
        "any_accuracy": round(sum(r["any"] for r in causes) / max(1, len(causes)), 3),
        "false_alarms_on_twins": sum(r["false_alarm"] for r in twins),
        "twins": len(twins),
        "foreign_cases": len(foreign),
        "foreign_top1_accuracy": round(sum(r["top1"] for r in foreign) / max(1, len(foreign)), 3),
        "foreign_false_alarms_on_twins": sum(r["false_alarm"] for r in twins if "via" in r),
        "model_all": model_all,
        "wall_s": round(wall_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "rows": rows,
    }


def _merge(dirs: list[str]) -> dict[str, Any]:
    """The shards' rows scored as one run: wall time is the longest shard's (they ran side by side)."""
    parts = [json.loads((Path(d) / "rows.json").read_text()) for d in dirs]
    rows = [r for p in parts for r in p["rows"]]
    results = _summary(rows, max(float(p["wall_s"]) for p in parts), None)
    results["shards"] = [{"dir": d, "shard": p.get("shard"), "wall_s": p["wall_s"],
                          "load_average_1m": p["load_average_1m"], "rows": len(p["rows"]),
                          "rediagnosed": p.get("rediagnosed", False)} for d, p in zip(dirs, parts, strict=True)]
    results["load_average_1m"] = max(float(p["load_average_1m"]) for p in parts)
    return results


def _finish(results: dict[str, Any], args: argparse.Namespace, work: Path | None) -> None:
    for r in results["rows"]:
        mark = ("FALSE ALARM" if r.get("false_alarm") else "ok") if r["run"] == "twin" else \
            ("top1" if r["top1"] else "any" if r["any"] else "MISS")
        top = r["top"]["stage"] + " " + r["top"]["title"][:70] if r["top"] else "-"
        print(f"{r['case']:<32} {r['run']:<5} {mark:<11} {top}")
    print({k: v for k, v in results.items() if k != "rows"})
    if not args.no_save:
        from common import save

        # a run on another model keeps the tiny model's results (the reference the corpus is scored on)
        save("diagnosis" if not args.model_all else f"diagnosis_model_{args.model_all}", results)


if __name__ == "__main__":
    main()
