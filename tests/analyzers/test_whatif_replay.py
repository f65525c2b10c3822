"""What-if, then measure: a cache finding's "if fixed" numbers come from replaying the recorded block-hash
chains with the volatile window moved, the rewritten request log (`diagnose --what-if-log`) replayed
against the real server measures what the replay predicted, and the hit rate is shown against KV pool
size so memory pressure is told apart from the prompt. Real server (tiny model), real SDK, real stores."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from analyzers_live import client, server, store

import llmtrace
from llmtrace.cli import main
from llmtrace.tracer.storage.store import read_connection

RULES = ("You answer for the Marlowe ferry office. Give sailing times from the printed timetable, never promise "
         "a refund, and send lost-property questions to the harbour desk. ") * 3


def _diagnose(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    assert main(["diagnose", "--db", str(db), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["findings"]


def _ev(finding: dict, label: str) -> dict:
    return next(e for e in finding["evidence"] if e["label"] == label)


def _hit_rate(db: Path) -> float:
    with read_connection(db) as conn:
        prompt, cached = conn.execute("SELECT sum(prompt_tokens), sum(cached_tokens) FROM passes").fetchone()
    return cached / prompt


def test_moved_window_predicted_by_replay_and_measured_on_the_server(
        fresh: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = server()
    with store(tmp_path / "t.duckdb", capture="full") as db:
        c = client(srv)
        for i in range(10):
            c.chat.completions.create(model=srv.model_id, max_tokens=4, temperature=0, top_p=0.9, seed=7,
                                      messages=[{"role": "system", "content": f"Request {uuid.uuid4()}.\n" + RULES},
                                                {"role": "user", "content": f"when does boat {i} leave?"}])
    top = _diagnose(db, capsys)[0]
    assert top["stage"] == "cache.prefix_match" and "uuid" in top["title"], top["title"]
    method = _ev(top, "what-if computed by")["value"]
    assert method.startswith("replaying 10 recorded block-hash chains with the volatile window moved"), method
    assert "1024 blocks per replica (the engine's pool)" in method
    fixed = _ev(top, "hit rate if fixed")
    assert fixed["baseline"] == 0 and fixed["value"] > 0.4
    prefill = _ev(top, "prefill tokens per 1,000 calls if fixed")
    assert prefill["value"] < prefill["baseline"]
    ttft = _ev(top, "median TTFT if fixed")  # prompts of one length: at the engine's own prefill ms a token
    assert 0 < ttft["value"] < ttft["baseline"]
    # the miss is the prompt: a larger pool replays to the same hit rate
    assert _ev(top, "replayed hit rate at 4x the KV pool (4096 blocks)")["value"] == \
        _ev(top, "replayed hit rate at 1x the KV pool (1024 blocks)")["value"]
    assert _ev(top, "what limits the hit rate (replayed pool sizes)")["value"].startswith("the prompts")

    log = tmp_path / "fixed.jsonl"
    assert main(["diagnose", "--db", str(db), "--what-if-log", str(log)]) == 0
    said = capsys.readouterr().out
    assert "wrote 10 requests" in said and "10 rewritten (volatile window moved out of: system)" in said
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 10 and all(x["moved"]["segment"] == "system" and x["moved"]["class"] == "uuid" for x in lines)
    body = lines[3]["body"]
    assert {k: body[k] for k in ("model", "max_tokens", "temperature", "top_p", "seed", "stream")} == \
        {"model": srv.model_id, "max_tokens": 4, "temperature": 0.0, "top_p": 0.9, "seed": 7, "stream": False}
    system, user = body["messages"]
    assert system["role"] == "system" and system["content"] == "Request .\n" + RULES  # the stable part
    assert user["content"].startswith("when does boat 3 leave?\n") and len(user["content"].split("\n")[-1]) == 36

    measured = _measure(fresh, lines, tmp_path / "m.duckdb")
    print(f"what-if uuid: predicted {fixed['value']:.3f}, measured {measured:.3f}")  # shown with -s
    assert abs(measured - fixed["value"]) <= 0.05, (measured, fixed["value"])


@pytest.fixture(scope="module")
def fresh() -> Iterator[Any]:
    """A second server the recorded traffic never reached, to measure on: its cache holds none of the
    recorded prefixes (the docs say: measure on a freshly started server)."""
    from llmtrace.demo_server import InProcessServer

    srv = InProcessServer("tiny").start()
    try:
        yield srv
    finally:
        srv.stop()


def _measure(srv: Any, lines: list[dict], db: Path) -> float:
    """The rewritten log sent to the server, into a fresh store: the hit rate the fix really gets."""
    llmtrace.init(db=db, service_name="what-if-measure", capture="hashes", strict=True)
    try:
        for x in lines:
            assert httpx.post(srv.base_url + x["endpoint"], json=x["body"], timeout=60).status_code == 200
    finally:
        llmtrace.shutdown()
    return _hit_rate(db)


ORCHARD = ("You keep the orchard ledger for Pell farm. Count crates by variety, flag bruised fruit, and never "
           "promise a delivery date the driver has not confirmed. ") * 3
TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
    "type": "object", "properties": {"crate": {"type": "string"}}}}}
    for n, d in (("crate_count", "Crates of one variety in the barn."), ("bruise_flag", "Mark a crate as bruised."),
                 ("driver_eta", "Ask the driver for a confirmed arrival time."))]


def _tools() -> list[dict]:
    tools = json.loads(json.dumps(TOOLS))
    tools[1]["function"]["description"] += f" ref {uuid.uuid4().hex[:24]}"
    return tools


@pytest.mark.parametrize("case", ["per-user", "tools"])
def test_per_user_value_and_tools_field_measure_close_to_the_replay(
        case: str, fresh: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a server of its own: the shared one holds other tests' prefixes (one of them signs in the same users),
    # which the recording would hit and a replay from a cold pool cannot know
    srv = server(f"what-if {case}")
    users = ["acct_7Hq2Lx", "acct_Pm04Zr", "acct_x9Ty3B"]
    with store(tmp_path / "t.duckdb", capture="full") as db:
        c = client(srv)
        for i in range(9):
            if case == "per-user":  # one cold miss per user, the rest hit: the fix shares one prefix for all
                kw = {"messages": [{"role": "system", "content": f"Signed in as {users[i % 3]}.\n" + ORCHARD},
                                   {"role": "user", "content": f"crates of pear {i}"}]}
            else:  # a reference mid-way through the tool list: the prefix before it caches, the rest not
                kw = {"messages": [{"role": "system", "content": ORCHARD.upper()},
                                   {"role": "user", "content": f"crate {i} bruised?"}], "tools": _tools()}
            c.chat.completions.create(model=srv.model_id, max_tokens=3, temperature=0, **kw)
    top = _diagnose(db, capsys)[0]
    assert ("the tools" if case == "tools" else "the system") in top["title"], top["title"]
    assert _ev(top, "what-if computed by")["value"].startswith("replaying 9 recorded block-hash chains")
    fixed = _ev(top, "hit rate if fixed")
    log = tmp_path / "fixed.jsonl"
    assert main(["diagnose", "--db", str(db), "--what-if-log", str(log)]) == 0
    capsys.readouterr()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    if case == "tools":  # the tools still parse, without the reference; it sits after the user's words
        assert all(len(x["body"]["tools"]) == 3 and " ref " in json.dumps(x["body"]["tools"]) for x in lines)
        assert all(x["body"]["messages"][-1]["content"].split("\n")[-1].isalnum() for x in lines)
    measured = _measure(fresh, lines, tmp_path / "m.duckdb")
    print(f"what-if {case}: recorded {fixed['baseline']:.3f}, predicted {fixed['value']:.3f}, measured {measured:.3f}")
    assert measured > fixed["baseline"] and abs(measured - fixed["value"]) <= 0.05, (measured, fixed)


def test_routing_what_if_replays_one_pool_and_prefix_routing_measures_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llmtrace.demo_server import InProcessServer

    depot = ("You route parcels for the Oster depot. Weigh each parcel, print the zone label, and hold anything "
             "over thirty kilos for the freight desk. ") * 3
    with InProcessServer("tiny", "--replicas", "3", "--routing", "round_robin") as rr, \
            store(tmp_path / "t.duckdb", capture="full") as db:
        c = client(rr)
        for i in range(9):
            c.chat.completions.create(model=rr.model_id, max_tokens=3, temperature=0, messages=[
                {"role": "system", "content": depot}, {"role": "user", "content": f"parcel {i} to zone {i % 4}?"}])
    top = next(f for f in _diagnose(db, capsys) if f["stage"] == "arrival.replica_selection")
    method = _ev(top, "what-if computed by")["value"]
    assert method.startswith("replaying 9 recorded block-hash chains routed by prefix through one LRU prefix "
                             "cache of 3072 blocks (the 3 replicas' pools together)"), method
    fixed = _ev(top, "hit rate if fixed")
    log = tmp_path / "asis.jsonl"
    assert main(["diagnose", "--db", str(db), "--what-if-log", str(log)]) == 0
    assert "0 rewritten (no volatile window found" in capsys.readouterr().out
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    with InProcessServer("tiny", "--replicas", "3", "--routing", "prefix_aware") as pa:
        measured = _measure(pa, lines, tmp_path / "m.duckdb")
    print(f"what-if routing: recorded {fixed['baseline']:.3f}, predicted {fixed['value']:.3f}, measured {measured:.3f}")
    assert measured > fixed["baseline"] and abs(measured - fixed["value"]) <= 0.05, (measured, fixed)


def test_hit_rate_against_pool_size_names_memory_pressure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = server("odd", tmp_path)  # a 48-block pool: five prompts of ~12 blocks each do not fit
    topics = ("tides", "lanterns", "harvests", "glaciers", "orchards")
    prompts = [f"Notes on {t}: " + " ".join(f"The {t} report line {k} says {t} matter to the valley folk." for k in range(16))
               for t in topics]
    with store(tmp_path / "t.duckdb", capture="hashes") as db:
        c = client(srv)
        for _ in range(3):
            for p in prompts:
                c.chat.completions.create(model=srv.model_id, max_tokens=2, temperature=0,
                                          messages=[{"role": "user", "content": p}])
    found = _diagnose(db, capsys)
    ev = next(f for f in found if f["stage"] == "cache.eviction")
    one = _ev(ev, "replayed hit rate at 1x the KV pool (48 blocks)")["value"]
    four = _ev(ev, "replayed hit rate at 4x the KV pool (192 blocks)")["value"]
    measured = _ev(ev, "measured hit rate (engine)")["value"]
    assert four >= one + 0.3, (one, four)
    assert abs(one - measured) <= 0.1, (one, measured)  # the replay reproduces what the engine measured
    assert _ev(ev, "what limits the hit rate (replayed pool sizes)")["value"].startswith("memory pressure")
    assert "a pool twice the size would have served" in ev["next_check"]
    # no prompt text in a hashes store: no log, and the error says what to record
    assert main(["diagnose", "--db", str(db), "--what-if-log", str(tmp_path / "x.jsonl")]) == 1
    assert "capture='full'" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
    assert main(["diagnose", "--db", str(db), "--what-if-log", str(tmp_path / "no" / "x.jsonl")]) == 2
    assert "cannot write the what-if log" in capsys.readouterr().err
