"""Foreign traces are first-class: four other projects' instrumentations (opentelemetry-instrumentation-
openai-v2, OpenLLMetry, OpenInference, LiteLLM's ``otel`` callback) wrap real calls to the real
``llmtrace serve`` and send their spans through the stock OTLP exporter to a real ``llmtrace collect``.
Each app has a volatile value planted in its system prompt (a different kind and position per app, half
the calls streamed) and a clean twin; ``diagnose --json`` on the collector's store names the value, its
exact offset, and nothing above ``info`` on the twin — as it does on llmtrace's own spans for the same
calls. No prompt text reaches the store under the default capture (``hashes``)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from collector_helpers import (
    ForeignApp,
    RunningCollector,
    diagnose_service,
    diagnose_services,
    query,
    send_foreign,
    start_collector,
)
from testkit import RunningServer

import llmtrace

LIBRARY = ("You answer questions for the Wrenfold public library. Give opening hours from the notice board, "
           "explain how to renew a loan online, say that overdue fines were abolished last spring, and offer "
           "to reserve a copy when every copy is out. Keep it to three short sentences. ")
BASE = LIBRARY * 3  # ~190 prompt tokens: twelve 16-token blocks, well over the minimum a block cache needs
MID = 205  # a position inside the fourth 64-character chunk, so only the recorded field can give it exactly


def _stamp(rng: random.Random) -> str:
    return f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T0{rng.randint(0, 9)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"


# instrumentation -> (field of one call, where it goes, its class as diagnose names it)
PLANTS: dict[str, tuple[Callable[[random.Random, int], str], str, str]] = {
    "otel-v2": (lambda rng, i: f"trace={uuid.UUID(int=rng.getrandbits(128))} ", "top", "uuid"),
    "openllmetry": (lambda rng, i: f" (as of {_stamp(rng)})", "mid", "timestamp"),
    "openinference": (lambda rng, i: f"Reader: {('ana', 'bo', 'cy')[i % 3]}@wrenfold.example. ", "top", "email"),
    "litellm": (lambda rng, i: f" sess {rng.getrandbits(48):012x} ", "mid", "hex_id"),
}


def _system(app: str, rng: random.Random, i: int, twin: bool) -> str:
    field, where, _ = PLANTS[app]
    value = "" if twin else field(rng, i)
    return value + BASE if where == "top" else BASE[:MID] + value + BASE[MID:]


def _offset(app: str) -> int:
    """Where the planted value starts in the system prompt: the diagnose title's 'at char N'."""
    field, where, _ = PLANTS[app]
    lead = len(field(random.Random(0), 0)) - len(field(random.Random(0), 0).lstrip())
    return (0 if where == "top" else MID) + lead + {"otel-v2": len("trace="), "openinference": len("Reader: "),
                                                    "openllmetry": len("(as of "), "litellm": len("sess ")}[app]


# OpenInference's app also offers a tool: its definition is a prompt segment of its own, hashed like the rest
TOOLS = [{"type": "function", "function": {"name": "catalogue_search", "description": "Find a title in the Wrenfold "
          "catalogue by author or ISBN.", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def _calls(app: str, twin: bool, seed: str = "") -> list[dict[str, Any]]:
    rng = random.Random(f"{app}-{twin}{seed}")
    extra = {"tools": TOOLS} if app == "openinference" else {}
    return [{"messages": [{"role": "system", "content": _system(app, rng, i, twin)},
                          {"role": "user", "content": f"Can I renew book {400 + 17 * i} twice?"}],
             "max_tokens": 5, "stream": i % 2 == 1, **extra} for i in range(8)]


@pytest.fixture(scope="module")
def collected(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[RunningCollector, dict[str, list[dict[str, Any]]]]]:
    tmp = tmp_path_factory.mktemp("foreign-diagnosis")
    col = start_collector(tmp)
    try:
        apps = {}
        # each app planted and clean; OpenLLMetry once more with its content capture off (no prompt on record)
        for app, content in [*((a, True) for a in PLANTS), ("openllmetry", False)]:
            for twin in (False, True):
                service = f"{app}{'' if content else '-blind'}-{'twin' if twin else 'cause'}"
                apps[service] = ForeignApp(app, _calls(app, twin, seed="" if content else "blind"), content)
        send_foreign(col, tmp, tiny_server.base_url + "/v1", apps)
        found = diagnose_services(col.db, list(apps))
        yield col, found
    finally:
        col.stop()


@pytest.mark.slow
@pytest.mark.parametrize("app", list(PLANTS))
def test_planted_value_named_on_foreign_spans(collected: tuple[RunningCollector, dict[str, Any]], app: str) -> None:
    _, found = collected
    cause, twin = found[f"{app}-cause"], found[f"{app}-twin"]
    assert cause, f"{app}: no finding"
    top = cause[0]
    cls = PLANTS[app][2]
    assert top["stage"] == "cache.prefix_match" and top["severity"] != "info", (app, cause)
    assert f" {cls} at char {_offset(app)} of the system" in top["title"], (app, top["title"])
    assert not [f for f in twin if f["severity"] != "info"], (app, twin)
    if app == "otel-v2":  # it records no cached tokens: the first missed token is an estimate, and says so
        assert "token ~" in top["title"], top["title"]


@pytest.mark.slow
def test_foreign_mapping_usage_host_and_no_text(collected: tuple[RunningCollector, dict[str, Any]]) -> None:
    col, _ = collected
    rows = query(col.db, "SELECT p.service, count(*), count(p.cached_tokens), count(p.finish_reason), "
                         "max(s.attributes->>'server.address') FROM passes p JOIN spans s ON s.span_id = p.span_id "
                         "GROUP BY p.service")
    by = {r[0]: r[1:] for r in rows}
    for app in PLANTS:
        n, cached, finish, host = by[f"{app}-cause"]
        assert n == 8, (app, by)
        # openai-v2 2.4b0 records no cached tokens; its streams' finish reasons are only in its output messages
        assert cached == (0 if app == "otel-v2" else 8), (app, by)
        assert finish == 8, (app, by)
        if app in ("openllmetry", "litellm"):  # OpenLLMetry's api_base, LiteLLM's hidden_params
            assert host == "127.0.0.1", (app, by)
    # LiteLLM's raw_gen_ai_request span carries the request and response bodies field by field
    ((raw,),) = query(col.db, "SELECT count(*) FROM spans WHERE name = 'raw_gen_ai_request' "
                              "AND attributes->>'llm.openai.messages.hash' IS NOT NULL")
    assert raw >= 8
    leaks = query(col.db, "SELECT service, name FROM spans WHERE attributes LIKE '%Wrenfold%' "
                          "OR events LIKE '%Wrenfold%' OR attributes LIKE '%renew book%'")
    assert not leaks, leaks  # the tool definition (its description names the library) included
    ((segs,),) = query(col.db, "SELECT any_value(s.attributes->>'llmtrace.prompt.segments') FROM passes p "
                               "JOIN spans s ON s.span_id = p.span_id WHERE p.service = 'openinference-twin'")
    assert [x["kind"] for x in json.loads(str(segs))] == ["tools", "system", "user"]


@pytest.mark.slow
def test_own_spans_name_the_same_value(tiny_server: RunningServer, tmp_path: Path,
                                       collected: tuple[RunningCollector, dict[str, Any]]) -> None:
    """The OpenLLMetry app's calls through llmtrace's own middleware instead: the same class, the same char."""
    _, found = collected
    db = tmp_path / "own.duckdb"
    llmtrace.init(db=db, service_name="own", strict=True)
    try:
        client = llmtrace.instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x",
                                                   max_retries=0))
        for c in _calls("openllmetry", False, seed="own"):  # other values: the server has not cached them
            kw = {"model": "tiny", "messages": c["messages"], "max_tokens": c["max_tokens"], "temperature": 0}
            if c["stream"]:
                for _ in client.chat.completions.create(**kw, stream=True):
                    pass
            else:
                client.chat.completions.create(**kw)
    finally:
        llmtrace.shutdown()
    own = diagnose_service(db, "own")[0]
    foreign = found["openllmetry-cause"][0]
    assert own["stage"] == foreign["stage"] == "cache.prefix_match"
    where = f"timestamp at char {_offset('openllmetry')} of the system"
    assert where in own["title"] and where in foreign["title"], (own["title"], foreign["title"])


@pytest.mark.slow
def test_no_prompt_on_record_is_reported_not_blamed(collected: tuple[RunningCollector, dict[str, Any]]) -> None:
    """OpenLLMetry with TRACELOOP_TRACE_CONTENT=false: token counts and cached tokens, no prompt. The prompts
    that prefilled again are reported (info, with the switch to turn on), the clean twin gets nothing."""
    col, found = collected
    ((segs,),) = query(col.db, "SELECT count(s.attributes->>'llmtrace.prompt.segments') FROM passes p "
                               "JOIN spans s ON s.span_id = p.span_id WHERE p.service LIKE 'openllmetry-blind-%'")
    assert segs == 0
    cache = [f for f in found["openllmetry-blind-cause"] if f["stage"] == "cache.prefix_match"]
    assert len(cache) == 1 and cache[0]["severity"] == "info", found["openllmetry-blind-cause"]
    assert "no prompt content on record" in cache[0]["title"]
    assert "TRACELOOP_TRACE_CONTENT" in json.dumps(cache[0])
    assert not [f for f in found["openllmetry-blind-twin"] if f["stage"] == "cache.prefix_match"]


def _check(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtrace.cli", "check", "--db", str(db), "--format", "text", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_check_against_the_twin(collected: tuple[RunningCollector, dict[str, Any]], tmp_path: Path) -> None:
    """`check` with the clean twin as baseline: OpenLLMetry's cause fails on the hit rate, explained by the
    planted value; openai-v2 reports no cached tokens, so its hit rate is skipped, not a 0% that passes."""
    col, _ = collected
    for app, verdict in (("openllmetry", "FAIL cache hit rate"), ("otel-v2", "SKIP cache hit rate")):
        base = tmp_path / f"{app}.json"
        assert _check(col.db, "--service", f"{app}-twin", "--save-baseline", str(base)).returncode == 0
        out = _check(col.db, "--service", f"{app}-cause", "--baseline", str(base))
        assert verdict in out.stdout, (app, out.stdout, out.stderr[-2000:])
        if app == "openllmetry":
            assert out.returncode == 1 and f"timestamp at char {_offset(app)} of the system" in out.stdout, out.stdout
