"""Bursts of concurrent requests sharing a prefix: a request that arrives while an earlier one is still
prefilling cannot reuse that prefix (nothing of it is cached yet), so it is no eviction: the cache finding
needs an earlier pass that had finished its prefill before this one arrived (controls before blame).
Real ``llmtrace serve`` (tiny model, self-draft speculation, as a corpus case saw it), the official SDK
wrapped by ``instrument()``, ``diagnose --json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator

import openai
import pytest
from testkit import RunningServer, start_server, stop_server

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.cli import main

POLICY = ("You answer for the Quayside bonded warehouse. Quote the lot number the customer gave, say which customs "
          "form is still missing, and never promise a release date. If the customer is angry, apologise once. "
          "Escalate anything about dangerous goods to a supervisor. Keep answers under eighty words. ")
ASKS = ["My crate arrived wet, lot L-{n}.", "Did you get the photos for L-{n}?", "Why is L-{n} still held?",
        "What else do you need for L-{n}?", "Who do I call about L-{n}?"]


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("burst"), "--speculative", "draft")
    try:
        yield s
    finally:
        stop_server(s)


def test_concurrent_bursts_are_not_blamed_on_eviction(server: RunningServer) -> None:
    llmtrace.init(db=server.db_path, service_name="burst", capture="hashes")
    try:
        client = instrument(openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0))

        def one(i: int) -> None:
            client.chat.completions.create(model="tiny", max_tokens=32, temperature=0, messages=[
                {"role": "system", "content": POLICY}, {"role": "user", "content": ASKS[i % 5].format(n=100 + i)}])

        for _ in range(2):
            threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        llmtrace.shutdown()
    # the server exports its side in the background; SIGTERM drains it and flushes every span before it exits 0,
    # so stopping it is the wait for a complete store (a fixed sleep could read it before the last batch)
    stop_server(server)
    assert server.process.returncode == 0, server.log()[-3000:]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(server.db_path), "--service", "burst", "--json"]) == 0
    found = json.loads(buf.getvalue())["findings"]
    assert not [f for f in found if f["stage"] == "cache.eviction" and f["severity"] != "info"], found[:1]
