"""What-if, then measure: a cache finding's "if fixed" numbers come from replaying the recorded block-hash
chains with the volatile window moved, the rewritten request log (`diagnose --what-if-log`) replayed
against the real server measures what the replay predicted, and the hit rate is shown against KV pool
size so memory pressure is told apart from the prompt. Real server (tiny model), real SDK, real stores."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

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
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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

    # measure: the rewritten log sent to the server, into a fresh store
    llmtrace.init(db=tmp_path / "m.duckdb", service_name="what-if-measure", capture="hashes", strict=True)
    try:
        for x in lines:
            assert httpx.post(srv.base_url + x["endpoint"], json=x["body"], timeout=60).status_code == 200
    finally:
        llmtrace.shutdown()
    measured = _hit_rate(tmp_path / "m.duckdb")
    assert abs(measured - fixed["value"]) <= 0.05, (measured, fixed["value"])


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
