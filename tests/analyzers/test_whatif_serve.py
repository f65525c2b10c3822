"""What-if, then measure, against `llmtrace serve` run as its own process: the app's middleware-only store
has no block chains, so its what-if says it is an estimate from token counts; the server's own store
(capture full) has the chains and the prompts, so its what-if is a replay and its rewritten request log,
posted back to the same server, measures close to what the replay predicted."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import llmtrace
from llmtrace.cli import main
from llmtrace.tracer.storage.store import StoreError, read_connection

RULES = ("You are the booking assistant of the Tamsin climbing gym. Quote day-pass prices from the list, "
         "never book a guided route without a waiver, and pass injuries to the front desk. ") * 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("serve")
    port, db, log = _free_port(), tmp / "server.duckdb", tmp / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llmtrace.cli", "serve", "--model", "tiny", "--port", str(port),
                                 "--db", str(db), "--capture", "full"], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "LLMTRACE_STRICT": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield base, db
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _read(db: Path, fn):  # the server holds its store only while it flushes: retry while it does
    deadline = time.monotonic() + 20
    while True:
        try:
            return fn()
        except StoreError:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def _diagnose(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    def once() -> str:
        code = main(["diagnose", "--db", str(db), *extra])
        out, err = capsys.readouterr()
        if code == 1 and "llmtrace diagnose:" in err and "what-if" not in err:
            raise StoreError(err)
        assert code == 0, err
        return out
    return _read(db, once)


def _top(out: str) -> dict:
    return json.loads(out)["findings"][0]


def _ev(f: dict, label: str) -> object:
    return next(e["value"] for e in f["evidence"] if e["label"] == label)


def _passes_since(db: Path, t_ns: int) -> tuple[int, float]:
    def once() -> tuple[int, float]:
        with read_connection(db) as conn:
            n, prompt, cached = conn.execute("SELECT count(*), sum(prompt_tokens), sum(cached_tokens) FROM passes "
                                             "WHERE start_ns >= ?", [t_ns]).fetchone()
        return int(n), (cached / prompt) if prompt else 0.0
    return _read(db, once)


def test_middleware_store_estimates_and_server_store_replays_and_measures(
        serve: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import openai

    from llmtrace.adapters import instrument

    base, server_db = serve
    app_db = tmp_path / "app.duckdb"
    llmtrace.init(db=app_db, service_name="gym-app", capture="full", strict=True)
    try:
        c = instrument(openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0))
        for i in range(10):
            c.chat.completions.create(model="tiny", max_tokens=3, temperature=0, messages=[
                {"role": "system", "content": f"Time now 2026-12-01 0{i % 10}:1{i % 6}:{10 + 3 * i}. " + RULES},
                {"role": "user", "content": f"price for {i + 2} people?"}])
    finally:
        llmtrace.shutdown()

    app = _top(_diagnose(app_db, capsys, "--json"))
    assert app["stage"] == "cache.prefix_match" and "timestamp" in app["title"], app["title"]
    assert str(_ev(app, "what-if computed by")).startswith("estimate from token counts"), app["evidence"]
    assert not any(e["label"].startswith("replayed hit rate at") for e in app["evidence"])  # no chains, no curve

    deadline = time.monotonic() + 20
    while _passes_since(server_db, 0)[0] < 10:  # the server flushes in the background
        assert time.monotonic() < deadline
        time.sleep(0.25)
    srv = _top(_diagnose(server_db, capsys, "--json"))
    assert srv["stage"] == "cache.prefix_match" and "timestamp" in srv["title"], srv["title"]
    assert str(_ev(srv, "what-if computed by")).startswith("replaying 10 recorded block-hash chains")
    predicted = float(_ev(srv, "hit rate if fixed"))  # type: ignore[arg-type]

    log = tmp_path / "fixed.jsonl"
    said = _diagnose(server_db, capsys, "--what-if-log", str(log))
    assert "10 rewritten (volatile window moved out of: system)" in said and f"{predicted:.1%}" in said, said
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    for i, x in enumerate(lines):  # the server records the rendered prompt: it goes back as a completion
        prompt = x["endpoint"] == "/v1/completions" and x["body"]["prompt"]
        assert x["body"]["max_tokens"] == 3 and x["body"]["temperature"] == 0
        # the timestamp left the system prompt for the end of the user's own words
        assert f"Time now . {RULES}" in prompt and prompt.index(f"{i + 2} people?") < prompt.index("2026-12-01 0")
    mark = time.time_ns()
    for x in lines:
        assert httpx.post(base + x["endpoint"], json=x["body"], timeout=60).status_code == 200
    while (got := _passes_since(server_db, mark))[0] < 10:
        assert time.monotonic() < deadline + 30
        time.sleep(0.25)
    measured = got[1]
    print(f"what-if timestamp (llmtrace serve process): predicted {predicted:.3f}, measured {measured:.3f}")
    assert measured > 0.4 and abs(measured - predicted) <= 0.05, (measured, predicted)
