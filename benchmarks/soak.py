"""Benchmark `soak`: does `llmtrace serve` hold its memory over thousands of requests?

Starts the real `llmtrace serve --model tiny` (tracing into a store, hashes capture) and sends SOAK_REQUESTS
(5,000) requests from SOAK_CLIENTS (8) concurrent clients: a mix of chat (buffered and streamed), completions
and Anthropic messages, a share of streams the client leaves mid-way, and a share of 400s. The server's RSS
(from /proc) is sampled every SOAK_EVERY (250) requests.

- rss_mb_start / rss_mb_after_warmup / rss_mb_end / rss_mb_max: the server's resident memory
- rss_slope_mb_per_1000: least-squares slope of RSS over the requests after warm-up (the first
  SOAK_WARMUP, 1,000), in MB per 1,000 requests; flat is |slope| < 2
- rss_series_mb: the samples, as "requests:MB" pairs
- ended_span_warnings: "Setting attribute on ended span" lines in the server's log (should be 0)

    python benchmarks/soak.py     # SOAK_REQUESTS, SOAK_CLIENTS, SOAK_EVERY, SOAK_WARMUP
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import save  # noqa: E402

REQUESTS = int(os.environ.get("SOAK_REQUESTS", "5000"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "8"))
EVERY = int(os.environ.get("SOAK_EVERY", "250"))
WARMUP = int(os.environ.get("SOAK_WARMUP", "1000"))
DB = os.environ.get("SOAK_DB")  # "none": no store (tells the server's own memory from the store writer's)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


async def _one(http: httpx.AsyncClient, i: int) -> None:
    kind = i % 10
    words = f"request {i} " + "about the weather " * (i % 7)
    msgs = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": words}]
    if kind in (0, 1, 2):
        await http.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs, "max_tokens": 4})
    elif kind in (3, 4):
        async with http.stream("POST", "/v1/chat/completions", json={
                "model": "tiny", "messages": msgs, "max_tokens": 4, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            async for _ in r.aiter_lines():
                pass
    elif kind == 5:  # a client that leaves mid-stream
        async with http.stream("POST", "/v1/chat/completions", json={
                "model": "tiny", "messages": msgs, "max_tokens": 64, "ignore_eos": True, "stream": True}) as r:
            seen = 0
            async for line in r.aiter_lines():
                seen += line.startswith("data: ")
                if seen >= 3:
                    break
    elif kind == 6:
        await http.post("/v1/completions", json={"model": "tiny", "prompt": words, "max_tokens": 4})
    elif kind in (7, 8):
        await http.post("/v1/messages", json={"model": "tiny", "max_tokens": 4, "messages": msgs[1:],
                                              "system": "You answer briefly.", "stream": kind == 8})
    else:  # a 400
        await http.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "bogus"}]})


async def _drive(base: str, pid: int) -> list[tuple[int, float]]:
    samples: list[tuple[int, float]] = [(0, rss_mb(pid))]
    next_i = 0
    done = 0
    lock = asyncio.Lock()

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal next_i, done
        while True:
            async with lock:
                if next_i >= REQUESTS:
                    return
                i = next_i
                next_i += 1
            await _one(http, i)
            async with lock:
                done += 1
                if done % EVERY == 0:
                    samples.append((done, rss_mb(pid)))
                    print(f"  {done:5d} requests  rss {samples[-1][1]:.1f} MB", flush=True)

    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http:
        await asyncio.gather(*[client(http) for _ in range(CLIENTS)])
    return samples


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="llmtrace-soak-"))
    port = _free_port()
    log = tmp / "serve.log"
    cmd = [sys.executable, "-m", "llmtrace.cli", "serve", "--model", "tiny", "--port", str(port),
           "--db", DB or str(tmp / "soak.duckdb")]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start:\n{log.read_text()}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        t0 = time.perf_counter()
        samples = asyncio.run(_drive(base, proc.pid))
        wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    after = [(x, y) for x, y in samples if x >= WARMUP]
    warm = after[0][1] if after else samples[-1][1]
    save(os.environ.get("SOAK_NAME", "soak"), {
        "requests": REQUESTS, "clients": CLIENTS, "wall_s": round(wall, 1),
        "requests_per_s": round(REQUESTS / wall, 1),
        "rss_mb_start": round(samples[0][1], 1), "rss_mb_after_warmup": round(warm, 1),
        "rss_mb_end": round(samples[-1][1], 1), "rss_mb_max": round(max(y for _, y in samples), 1),
        "rss_slope_mb_per_1000": round(slope_per_1000(after), 2),
        "rss_series_mb": " ".join(f"{x}:{y:.1f}" for x, y in samples),
        "ended_span_warnings": log.read_text(errors="replace").count("Setting attribute on ended span"),
    })


if __name__ == "__main__":
    main()
