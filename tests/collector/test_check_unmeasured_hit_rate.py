"""``llmtrace check`` where the instrumentation measures no hit rate: opentelemetry-instrumentation-openai-v2
records no cached-token counts, so the gate had nothing to compare and skipped, and a deploy that put a
request uuid at the top of the system prompt passed it (exit 0) while ``diagnose`` named the uuid as
critical. The prompts (their hashes) still show the cache breaking at that deploy: the gate fails on it. A
clean twin, and a uuid that was there in both deploys (nothing regressed), still skip. Real openai-v2 package,
real ``llmtrace serve``, real ``llmtrace collect``, deploys set as a user sets them
(OTEL_RESOURCE_ATTRIBUTES=service.version=...), ``llmtrace check`` as a subprocess.
"""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_helpers import ForeignApp, RunningCollector, send_foreign, start_collector
from testkit import RunningServer

FRONT = ("You take orders for the Brackenwood bakery. Confirm the pickup time, list allergens when asked, never "
         "promise a cake in under two days, and offer the loyalty card to first-time customers. ") * 3
ASKS = ["Can I order a sourdough for Friday?", "Does the carrot cake have nuts?", "Are you open on Sunday?"]
SCENARIOS = {"planted": (False, True), "twin": (False, False), "both": (True, True)}  # uuid in v1, in v2


def _calls(volatile: bool, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(6):
        head = f"request_id: {uuid.UUID(int=rng.getrandbits(128))}\n" if volatile else ""
        out.append({"messages": [{"role": "system", "content": head + FRONT},
                                 {"role": "user", "content": ASKS[i % len(ASKS)]}],
                    "max_tokens": 4, "stream": i % 2 == 1})
    return out


@pytest.fixture(scope="module")
def collected(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCollector]:
    tmp = tmp_path_factory.mktemp("unmeasured-hit-rate")
    col = start_collector(tmp)
    rng = random.Random(11)
    mp = pytest.MonkeyPatch()
    try:
        for n, deploy in enumerate(("v1", "v2")):
            mp.setenv("OTEL_RESOURCE_ATTRIBUTES", f"service.version={deploy}")  # the foreign apps' deploy
            specs = tmp / deploy  # each deploy's call files apart
            specs.mkdir()
            send_foreign(col, specs, tiny_server.base_url + "/v1",
                         {name: ForeignApp("otel-v2", _calls(uuids[n], rng)) for name, uuids in SCENARIOS.items()})
        col.wait_written(2 * 6 * len(SCENARIOS))
        yield col
    finally:
        mp.undo()
        col.stop()


def _check(db: Path, service: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "check", "--db", str(db), "--service", service,
                          "--deploy", "v2", "--baseline-deploy", "v1"], capture_output=True, text=True, timeout=180)
    return out.returncode, out.stdout + out.stderr


def test_a_uuid_shipped_with_the_deploy_fails_the_gate_without_cached_tokens(collected: RunningCollector) -> None:
    rc, out = _check(collected.db, "planted")
    assert rc == 1 and "FAIL cache hit rate" in out, out
    assert "cached tokens not recorded" in out and "uuid" in out and "since deploy v2" in out, out


@pytest.mark.parametrize("service", ["twin", "both"])
def test_nothing_that_regressed_still_skips(collected: RunningCollector, service: str) -> None:
    rc, out = _check(collected.db, service)
    assert rc == 0 and "SKIP cache hit rate" in out and "cached-token counts" in out, out
