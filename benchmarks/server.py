"""Benchmark `server`: what serving over HTTP costs, and how the bundled server compares with llama.cpp's.

Same default model (SmolLM2-135M-Instruct, the Q4_1 GGUF), same prompts, greedy, a fixed number of output
tokens per request (EOS ignored), streaming clients at 1, 4 and 16 concurrent:

- engine_tok_s_cN / engine_ttft_p50_ms_cN: the engine called directly in-process (AsyncEngine), no HTTP,
  traced the same way (a pass span per request into a store), so the ratio below isolates HTTP
- http_tok_s_cN / http_ttft_p50_ms_cN / http_ttft_p99_ms_cN: `llmtrace serve` (tracing into a store) over
  loopback HTTP, SSE streaming, clients in this process with httpx
- http_overhead_ratio(_cN): engine tok/s / HTTP tok/s, the median over back-to-back pairs (target <= 1.1)
- llamacpp_server_tok_s_cN / llamacpp_server_ttft_p50_ms_cN: llama-cpp-python's OpenAI-compatible server on
  the same GGUF (EOS suppressed with logit_bias), the second peer (it serves one request at a time): taken
  from this venv when `llama_cpp.server` imports, else from its own venv, built when BENCH_LLAMACPP_BUILD=1
  (llamacpp_build_s); skipped with a message otherwise
- http_vs_llamacpp_c16: http_tok_s_c16 / llamacpp_server_tok_s_c16 (target >= 2)
- native_llamacpp_server_tok_s_cN / _ttft_p50_ms_cN / _ttft_p99_ms_cN: llama.cpp's own server (the C++
  `llama-server` code, in-process through the `xllamacpp` wheel, `bench` extra) on the same GGUF with
  continuous batching over BENCH_NATIVE_PARALLEL (16) slots, the same threads, prompts and clients, its
  repetitions interleaved with ours (direct, HTTP, native, direct, ...); skipped with a message when
  xllamacpp is not installed
- http_vs_native_llamacpp_cN: http_tok_s_cN / native_llamacpp_server_tok_s_cN (targets: >= 1.0 at 1 client,
  >= 1.5 at 16), and _pair_median_cN, the median over the back-to-back repetition pairs
- load_average_at_start / _at_end: the 1-minute load average, because the machine may be shared

- load_*: the longer run of the load test: 64 streaming clients for BENCH_LOAD_S (30) seconds against 2
  replicas of the tiny model (16 running, 16 queued, the rest shed with 429 and retried after Retry-After);
  requests completed and shed, tok/s, TTFT p50/p99, whether the pools were whole again afterwards, and
  how many requests did not leave exactly one pass span in the store (should be 0)

TTFT is measured by the client: request sent -> first non-empty content chunk. tok/s is aggregate: all
output tokens of the level / its wall time. Engine and HTTP runs alternate, BENCH_REPS times each, and the
fastest repetition of each is kept, so load from other processes on a shared machine skews both alike.

    python benchmarks/server.py     # BENCH_MAX_TOKENS (64), BENCH_SKIP_LLAMACPP=1, BENCH_LEVELS=1,4,16,
                                    # BENCH_REPS (5), BENCH_LOAD_S (30; 0 skips the load run),
                                    # BENCH_SKIP_NATIVE=1, BENCH_NATIVE_PARALLEL (16),
                                    # BENCH_SERVER_THREADS (the core count)

The clients (ours and llama.cpp's alike) run on uvloop when it is installed and parse chunks with orjson: on 2
cores the client shares the CPU with the server it measures, so a heavier client reads as server overhead.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import orjson  # noqa: E402

try:
    import uvloop
except ImportError:  # the clients fall back to asyncio's own loop
    uvloop = None

from common import save  # noqa: E402

MAX_TOKENS = int(os.environ.get("BENCH_MAX_TOKENS", "64"))
LEVELS = tuple(int(x) for x in os.environ.get("BENCH_LEVELS", "1,4,16").split(","))
ROUNDS = {1: 3, 4: 2, 16: 2}  # requests per client at each level
DTYPE = "bfloat16"  # the server's default; the direct engine is configured the same
REPS = int(os.environ.get("BENCH_REPS", "5"))  # repetitions per level, interleaved; the best is kept
# compute threads of every server (ours through OMP_NUM_THREADS, llama.cpp's n_threads): on a machine shared with
# other work, BENCH_SERVER_THREADS=1 keeps OpenMP from spin-waiting on a core another process holds
THREADS = int(os.environ.get("BENCH_SERVER_THREADS", "0")) or os.cpu_count() or 2
LLAMACPP_VERSION = "0.3.36"
NATIVE_PARALLEL = int(os.environ.get("BENCH_NATIVE_PARALLEL", "16"))
BENCH_CACHE = Path(os.environ.get("LLMTRACE_CACHE", Path.home() / ".cache" / "llmtrace")) / "bench"
SYSTEM = ("You are a support assistant for an online bookshop. Answer in full sentences, explain your reasoning "
          "and list the steps the customer should follow.")


def prompt(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Ticket {i}: my order #{1000 + i} arrived damaged, what now?"}]


def run_clients(coro):  # type: ignore[no-untyped-def]
    """asyncio.run, on uvloop when it is installed (it comes with the server's dependencies)."""
    return uvloop.run(coro) if uvloop is not None else asyncio.run(coro)


def new_client_loop() -> asyncio.AbstractEventLoop:
    return uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))], 1) if v else float("nan")


# ── clients ────────────────────────────────────────────────────────────────────────────────────────
async def read_stream(r: httpx.Response, t0: float) -> tuple[int, float | None]:
    """(output tokens, ms from t0 to the first content chunk) of a chat-completions SSE response."""
    ttft = None
    tokens = 0
    content_chunks = 0  # servers without stream usage (llama-cpp-python) send one token per chunk
    async for line in r.aiter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = orjson.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        choices = chunk.get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content"):
            content_chunks += 1
            if ttft is None:
                ttft = (time.perf_counter() - t0) * 1e3
    return tokens or content_chunks, ttft


async def http_request(http: httpx.AsyncClient, body: dict) -> tuple[int, float | None]:
    t0 = time.perf_counter()
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        return await read_stream(r, t0)


async def http_level(base: str, model: str, c: int, extra: dict, keepalive: bool = True) -> tuple[float, list[float]]:
    # llama.cpp's HTTP layer (cpp-httplib) drops idle kept-alive connections on its own schedule, and httpx then
    # fails the request it sent on one: its clients open a connection per request (~0.1 ms on loopback)
    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c if keepalive else 0)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as http:
        def body(i: int) -> dict:
            return {"model": model, "messages": prompt(i), "max_tokens": MAX_TOKENS, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}, **extra}

        await http_request(http, body(10_000))  # warm-up
        ttfts: list[float] = []
        total = 0

        async def client(k: int) -> None:
            nonlocal total
            for j in range(ROUNDS[c]):
                n, ttft = await http_request(http, body(k * 100 + j))
                total += n
                if ttft is not None:
                    ttfts.append(ttft)

        t0 = time.perf_counter()
        await asyncio.gather(*[client(k) for k in range(c)])
        return total / (time.perf_counter() - t0), ttfts


class DirectEngine:
    """The same engine the server runs, called in-process through AsyncEngine (no HTTP), stepped the way the
    server steps it: on the thread that loaded the model, with the clients' event loop on another thread."""

    def __init__(self, model_path: str, store: Path) -> None:
        import llmtrace
        from llmtrace.backend.engine.async_engine import AsyncEngine
        from llmtrace.backend.engine.config import EngineConfig
        from llmtrace.backend.engine.engine import Engine
        from llmtrace.backend.generation.params import SamplingParams

        llmtrace.init(db=store, service_name="bench-direct")
        self.engine = Engine(model_path, EngineConfig(dtype=DTYPE, num_threads=THREADS))
        self.ae = AsyncEngine(self.engine, background=False)
        self.loop = new_client_loop()
        threading.Thread(target=self.loop.run_forever, name="bench-clients", daemon=True).start()
        self.params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        self._ids = iter(range(10**9))

    async def one(self, i: int) -> tuple[int, float | None]:
        from llmtrace.backend.engine.request import EngineRequest
        from llmtrace.tracer import recording as rec

        tok = self.engine.tokenizer
        t0 = time.perf_counter()
        # Traced like the server's requests (a pass span the engine records its stages under), so the ratio
        # measures HTTP, not tracing; the `tracer` benchmark measures tracing.
        ps = rec.start_pass("smol", side="server")
        ids = tok.encode(tok.apply_chat_template(prompt(i)), add_special_tokens=True)
        ttft, n = None, 0
        async for o in self.ae.generate(EngineRequest(f"b{next(self._ids)}", ids, self.params, pass_span=ps)):
            if ttft is None and o.text_delta:
                ttft = (time.perf_counter() - t0) * 1e3
            n = o.num_output_tokens
        ps.end()
        return n, ttft

    async def level(self, c: int) -> tuple[float, list[float]]:
        await self.one(10_000)  # warm-up
        ttfts: list[float] = []
        total = 0

        async def client(k: int) -> None:
            nonlocal total
            for j in range(ROUNDS[c]):
                n, ttft = await self.one(k * 100 + j)
                total += n
                if ttft is not None:
                    ttfts.append(ttft)

        t0 = time.perf_counter()
        await asyncio.gather(*[client(k) for k in range(c)])
        return total / (time.perf_counter() - t0), ttfts

    def run_level(self, c: int) -> tuple[float, list[float]]:
        """One level: clients on the client thread, the engine stepped on this thread until they are done."""
        done = threading.Event()
        future = asyncio.run_coroutine_threadsafe(self.level(c), self.loop)
        future.add_done_callback(lambda _: (done.set(), self.ae.wake()))
        self.ae.run(until=done)
        return future.result()

    def close(self) -> None:
        import llmtrace

        self.loop.call_soon_threadsafe(self.loop.stop)
        self.ae.shutdown()
        llmtrace.shutdown()


def wait_up(proc: subprocess.Popen, base: str, log: Path, timeout_s: float = 300, path: str = "/v1/models") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}{path}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not come up: {log.read_text()[-2000:]}")


def best_of(runs: list[tuple[float, list[float]]]) -> tuple[float, list[float]]:
    """The fastest repetition: on a shared machine, other load only ever slows a run down."""
    return max(runs, key=lambda r: r[0])


def record(out: dict[str, object], prefix: str, c: int, tok_s: float, ttfts: list[float]) -> None:
    out[f"{prefix}_tok_s_c{c}"] = round(tok_s, 1)
    out[f"{prefix}_ttft_p50_ms_c{c}"] = pct(ttfts, 0.5)
    out[f"{prefix}_ttft_p99_ms_c{c}"] = pct(ttfts, 0.99)
    print(f"{prefix} c={c}: {tok_s:.1f} tok/s, ttft p50 {pct(ttfts, 0.5)} p99 {pct(ttfts, 0.99)} ms", flush=True)


def start_llmtrace(model_path: str, tmp: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = tmp / "llmtrace-serve.log"
    cmd = [sys.executable, "-m", "llmtrace.cli", "serve", "--model", model_path, "--port", str(port),
           "--db", str(tmp / "bench.duckdb"), "--served-model-name", "smol", "--dtype", DTYPE]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": str(THREADS)})
    base = f"http://127.0.0.1:{port}"
    wait_up(proc, base, log)
    return proc, base


def start_native(model_path: str, tmp: Path) -> tuple[subprocess.Popen | None, str]:
    """llama.cpp's native server (xllamacpp) as a child process: (process, base URL), or (None, why not)."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        return None, "xllamacpp is not installed (pip install -e '.[bench]')"
    port = free_port()
    log = tmp / "native-llamacpp.log"
    threads = str(THREADS)
    # as many context tokens per slot as our server gets per sequence on this benchmark's prompts, and more
    cmd = [sys.executable, str(Path(__file__).resolve().parent / "_llamacpp_native.py"), model_path, str(port),
           str(NATIVE_PARALLEL), str(NATIVE_PARALLEL * 1024), threads]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_up(proc, base, log, path="/health")  # /v1/models answers while the model is still loading
    return proc, base


def engine_vs_http(model_path: str, tmp: Path) -> dict[str, object]:
    """Engine direct, HTTP and llama.cpp's native server, interleaved level by level (REPS times each, best
    kept): every repetition of each runs next to one of the others, so the machine's other load hits all alike."""
    out: dict[str, object] = {}
    proc, base = start_llmtrace(model_path, tmp)
    direct = DirectEngine(model_path, tmp / "direct.duckdb")
    native, native_base = (None, "BENCH_SKIP_NATIVE=1") if os.environ.get("BENCH_SKIP_NATIVE") == "1" else \
        start_native(model_path, tmp)
    if native is None:
        out["native_llamacpp_skipped"] = native_base
        print(native_base, file=sys.stderr)
    else:
        out["native_llamacpp_n_parallel"] = NATIVE_PARALLEL
        out["native_llamacpp_threads"] = THREADS
    try:
        for c in LEVELS:
            e_runs, h_runs, n_runs = [], [], []
            for _ in range(REPS):
                e_runs.append(direct.run_level(c))
                h_runs.append(run_clients(http_level(base, "smol", c, {"ignore_eos": True})))
                if native is not None:  # llama-server takes ignore_eos too
                    n_runs.append(run_clients(http_level(native_base, "smol", c, {"ignore_eos": True}, keepalive=False)))
            record(out, "engine", c, *best_of(e_runs))
            record(out, "http", c, *best_of(h_runs))
            # Each HTTP run is compared with the engine run just before it, so slow drifts in the machine's
            # other load cancel out; the median pair is reported.
            pairs = sorted(e[0] / h[0] for e, h in zip(e_runs, h_runs, strict=True) if h[0] > 0)
            if pairs:
                out[f"http_overhead_ratio_c{c}"] = round(pairs[len(pairs) // 2], 3)
            if n_runs:
                record(out, "native_llamacpp_server", c, *best_of(n_runs))
                best_n = best_of(n_runs)[0]
                if best_n > 0:
                    out[f"http_vs_native_llamacpp_c{c}"] = round(best_of(h_runs)[0] / best_n, 2)
                vs = sorted(h[0] / n[0] for h, n in zip(h_runs, n_runs, strict=True) if n[0] > 0)
                if vs:
                    out[f"http_vs_native_llamacpp_pair_median_c{c}"] = round(vs[len(vs) // 2], 2)
    finally:
        direct.close()
        proc.terminate()
        proc.wait(60)
        if native is not None:
            native.terminate()
            native.wait(60)
    return out


# ── llama.cpp ──────────────────────────────────────────────────────────────────────────────────────
def llamacpp_python() -> tuple[Path | None, float | None, str]:
    """The venv's python with llama_cpp.server importable, building it on first use (timed)."""
    venv = BENCH_CACHE / "llamacpp-venv"
    py = venv / "bin" / "python"
    stamp = BENCH_CACHE / "build.json"
    ok = py.exists() and subprocess.run([str(py), "-c", "import llama_cpp.server"], capture_output=True).returncode == 0
    record = json.loads(stamp.read_text()) if stamp.exists() else {}
    if ok:
        return py, record.get("build_s"), ""
    # llama_cpp.server imports without its extra; the app module needs fastapi and the rest of [server]
    here = subprocess.run([sys.executable, "-c", "import llama_cpp.server.app"], capture_output=True).returncode == 0
    if here:  # installed next to us (pip install 'llama-cpp-python[server]')
        return Path(sys.executable), None, ""
    if os.environ.get("BENCH_LLAMACPP_BUILD") != "1" and os.environ.get("BENCH_LLAMACPP_REBUILD") != "1":
        return None, None, ("llama-cpp-python's server is not installed (pip install 'llama-cpp-python[server]', or "
                            "BENCH_LLAMACPP_BUILD=1 builds it into its own venv: ~200 s on 2 idle cores)")
    if record.get("rc") not in (None, 0) and os.environ.get("BENCH_LLAMACPP_REBUILD") != "1":
        return None, record.get("build_s"), (f"llama-cpp-python did not build here earlier (exit {record['rc']} after "
                                            f"{record.get('build_s')} s; 124 = timed out); BENCH_LLAMACPP_REBUILD=1 retries")
    BENCH_CACHE.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", f"llama-cpp-python[server]=={LLAMACPP_VERSION}"],
                           capture_output=True, text=True, timeout=900,
                           env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2),
                                # only the text model library: the multimodal tools double the build time
                                "CMAKE_ARGS": "-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF"})
    except subprocess.TimeoutExpired:
        build_s = round(time.perf_counter() - t0, 1)
        stamp.write_text(json.dumps({"rc": 124, "build_s": build_s}))
        return None, build_s, f"llama-cpp-python did not finish building in {build_s:.0f} s"
    except (subprocess.SubprocessError, OSError) as exc:
        return None, None, f"llama-cpp-python did not build: {exc}"
    build_s = round(time.perf_counter() - t0, 1)
    stamp.write_text(json.dumps({"rc": r.returncode, "build_s": build_s}))
    if r.returncode != 0:
        return None, build_s, "llama-cpp-python did not build: " + (r.stderr or r.stdout)[-300:].replace("\n", " ")
    return py, build_s, ""


def llamacpp_levels(model_path: str, tmp: Path) -> dict[str, object]:
    py, build_s, why = llamacpp_python()
    out: dict[str, object] = {}
    if build_s is not None:
        out["llamacpp_build_s"] = build_s
    if py is None:
        out["llamacpp_skipped"] = why
        print(why, file=sys.stderr)
        return out
    port = free_port()
    log = tmp / "llamacpp.log"
    threads = str(THREADS)  # the same compute threads as ours and the native peer's
    cmd = [str(py), "-m", "llama_cpp.server", "--model", model_path, "--port", str(port), "--host", "127.0.0.1",
           "--n_ctx", "4096", "--n_threads", threads, "--n_threads_batch", threads, "--model_alias", "smol",
           # by default a new request interrupts the one streaming: queue them instead, as a server should
           "--interrupt_requests", "False"]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_up(proc, base, log)
        # llama.cpp has no ignore_eos on this endpoint: suppress the EOS token instead (same effect).
        for c in LEVELS:
            runs = [run_clients(http_level(base, "smol", c, {"logit_bias": {"2": -100}})) for _ in range(REPS)]
            record(out, "llamacpp_server", c, *best_of(runs))
    finally:
        proc.terminate()
        proc.wait(60)
    return out


# ── longer load run ────────────────────────────────────────────────────────────────────────────────
async def load_client(http: httpx.AsyncClient, k: int, stop_at: float, tally: dict[str, list]) -> None:
    i = 0
    while time.perf_counter() < stop_at:
        body = {"model": "tiny", "stream": True, "max_tokens": 32, "ignore_eos": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": "Shared support-desk preamble. " * 8},
                             {"role": "user", "content": f"client {k} ticket {i}"}]}
        i += 1
        t0 = time.perf_counter()
        async with http.stream("POST", "/v1/chat/completions", json=body) as r:
            tally["trace_ids"].append(r.headers.get("x-llmtrace-trace-id"))
            if r.status_code == 429:
                await r.aread()
                tally["shed"].append(1)
                await asyncio.sleep(min(float(r.headers.get("retry-after", "1")), 1.0))
                continue
            r.raise_for_status()
            tokens, ttft = await read_stream(r, t0)
        tally["ok"].append(tokens)
        if ttft is not None:
            tally["ttft"].append(ttft)


def load_run(tmp: Path) -> dict[str, object]:
    """64 streaming clients against 2 tiny-model replicas for BENCH_LOAD_S seconds, shedding past the limits."""
    from llmtrace.tracer.storage.store import read_connection

    seconds = float(os.environ.get("BENCH_LOAD_S", "30"))
    port = free_port()
    log = tmp / "load-serve.log"
    db = tmp / "load.duckdb"
    cmd = [sys.executable, "-m", "llmtrace.cli", "serve", "--model", "tiny", "--port", str(port), "--db", str(db),
           "--replicas", "2", "--max-running", "16", "--max-queued", "16"]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    tally: dict[str, list] = {"ok": [], "shed": [], "ttft": [], "trace_ids": []}
    try:
        wait_up(proc, base, log)

        async def run() -> float:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
            async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as http:
                t0 = time.perf_counter()
                await asyncio.gather(*[load_client(http, k, t0 + seconds, tally) for k in range(64)])
                return time.perf_counter() - t0

        wall = asyncio.run(run())
        time.sleep(1.0)
        stats = httpx.get(f"{base}/stats", timeout=10).json()
        pools_full = all(r["available_blocks"] == r["num_blocks"] for r in stats["replicas"].values())
    finally:
        proc.terminate()
        proc.wait(60)
    ids = [t for t in tally["trace_ids"] if t]
    with read_connection(db) as conn:
        conn.execute("CREATE TEMP TABLE wanted (trace_id VARCHAR)")
        conn.executemany("INSERT INTO wanted VALUES (?)", [[t] for t in ids])
        passes = conn.execute("SELECT count(*), count(DISTINCT r.trace_id) FROM requests r "
                              "JOIN wanted w USING (trace_id)").fetchone()
    out: dict[str, object] = {
        "load_seconds": round(wall, 1),
        "load_requests_ok": len(tally["ok"]),
        "load_requests_shed": len(tally["shed"]),
        "load_tok_s": round(sum(tally["ok"]) / wall, 1),
        "load_ttft_p50_ms": pct(tally["ttft"], 0.5),
        "load_ttft_p99_ms": pct(tally["ttft"], 0.99),
        "load_pools_full_after": int(pools_full),
        "load_requests_without_one_pass_span": len(ids) - int(passes[1]) + (int(passes[0]) - int(passes[1])),
    }
    print(out, flush=True)
    return out


def main() -> None:
    from llmtrace.backend.model.pull import default_model_path

    model = default_model_path()
    if not model.exists():
        raise SystemExit(f"default model missing at {model}; run `llmtrace model pull`")
    results: dict[str, object] = {"max_tokens": MAX_TOKENS, "model": model.name, "threads": THREADS,
                                  "load_average_at_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="llmtrace-bench-server-") as d:
        tmp = Path(d)
        results.update(engine_vs_http(str(model), tmp))
        if os.environ.get("BENCH_LOAD_S") != "0":
            results.update(load_run(tmp))
        if os.environ.get("BENCH_SKIP_LLAMACPP") != "1":
            try:  # the second peer failing must not lose the rest of the run
                results.update(llamacpp_levels(str(model), tmp))
            except Exception as exc:  # noqa: BLE001
                results["llamacpp_skipped"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        else:
            results["llamacpp_skipped"] = "BENCH_SKIP_LLAMACPP=1"
    top = max(LEVELS)
    if f"http_overhead_ratio_c{top}" in results:
        results["http_overhead_ratio"] = results[f"http_overhead_ratio_c{top}"]
    h = results.get(f"http_tok_s_c{top}")
    lc = results.get(f"llamacpp_server_tok_s_c{top}")
    if isinstance(lc, float) and isinstance(h, float) and lc > 0:
        results[f"http_vs_llamacpp_c{top}"] = round(h / lc, 2)
    results["load_average_at_end"] = round(os.getloadavg()[0], 2)
    if max(results["load_average_at_start"], results["load_average_at_end"]) > (os.cpu_count() or 1):  # type: ignore[call-overload]
        results["note"] = ("measured under load: other processes shared the CPUs (see the load averages); "
                           "every server ran interleaved with the others, so the ratios are fairer than the absolutes")
    save("server", results)


if __name__ == "__main__":
    main()
