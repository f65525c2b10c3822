"""Latency and cost symptoms, with their causes planted for real through the in-process backend."""

from __future__ import annotations

import base64
import datetime as dt
import random
import threading
from pathlib import Path

import pytest
from analyzers_live import client, expect_first, findings, server, store

from llmtrace.adapters.helpers.prompt_assembly import SystemPromptAssembler

pytestmark = pytest.mark.slow

POLICY = "Policy: refunds are accepted within 30 days of delivery with the receipt. " * 6
USER = [{"role": "user", "content": "Where is my order 48213? It was due on Monday."}]


def _ask(c, model: str, system: str, max_tokens: int = 4, **kw) -> object:
    return c.chat.completions.create(model=model, messages=[{"role": "system", "content": system}, *USER],
                                     max_tokens=max_tokens, temperature=0, **kw)


def _calls(tmp: Path, template: str, n: int = 4, deploy: str | None = None, tag: str = "") -> None:
    srv = server()
    c = client(srv)
    asm = SystemPromptAssembler(template)
    for i in range(n):
        now = (dt.datetime(2026, 3, 1, 9, 0, 0) + dt.timedelta(seconds=7 * i)).isoformat()
        _ask(c, srv.model_id, asm.assemble(now=now, tag=tag).text)


def test_slow_first_token_names_prefix_match_and_the_timestamp(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        _calls(tmp_path, "Current time: {now}. You are Acme's support agent ({tag}). " + POLICY, tag="sft1")
    found = expect_first(db, "slow_first_token", "cache.prefix_match")
    assert "intake.system_prompt" in found[0].stages  # one finding for the one cause, both stages named
    window = next(e for e in found[0].evidence if e.label == "volatile window")
    # "Current time: " is 14 chars; the segment named as the headline names it (issue 35: "system prompt")
    assert str(window.value) == "timestamp at char 14 of the system prompt (segment 'system')"
    assert found[0].loss_tokens > 0 and "re-prefilled" in found[0].title


def test_slow_first_token_silent_when_the_prompt_is_stable(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb") as db:
        _calls(tmp_path, "You are Acme's support agent ({tag}). " + POLICY, tag="sft2")
    assert findings(db, "slow_first_token") == []


def _jwt(i: int) -> str:
    """A JWT as an app mints one per request: the header fixed, the claims and the signature new each time."""
    claims = base64.urlsafe_b64encode(f'{{"sub":"agent","iat":{1764500000 + 61 * i}}}'.encode()).decode().rstrip("=")
    sig = base64.urlsafe_b64encode(random.Random(i).randbytes(32)).decode().rstrip("=")
    return f"eyJhbGciOiJIUzI1NiJ9.{claims}.{sig}"


@pytest.mark.parametrize("per_call", [True, False], ids=["token-per-call", "same-token"])
def test_a_credential_minted_per_call_is_named_and_a_fixed_one_is_not(tmp_path: Path, per_call: bool) -> None:
    """The scrubber hides secrets before anything is hashed; each becomes a marker keyed on the secret, so a
    token that changes on every call still shows where the prompts part (and is never stored)."""
    srv = server()
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for i in range(4):
            _ask(c, srv.model_id, f"You are Acme's support agent (jwt{per_call}). " + POLICY
                 + f"Upstream credential: {_jwt(i if per_call else 0)}\n" + POLICY)
    text = db.read_bytes()
    assert b"eyJhbGciOiJIUzI1NiJ9" not in text and _jwt(1).split(".")[2][:12].encode() not in text
    if not per_call:
        assert findings(db, "slow_first_token") == []
        return
    found = expect_first(db, "slow_first_token", "cache.prefix_match")
    window = next(e for e in found[0].evidence if e.label == "volatile window")
    assert str(window.value).startswith("credential at char "), window.value


def test_cost_after_deploy_names_the_deploy_and_the_segment(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    with store(db, deploy="v1"):
        _calls(tmp_path, "You are Acme's support agent ({tag}). " + POLICY, tag="cad1")
    with store(db, deploy="v2"):
        _calls(tmp_path, "Current time: {now}. You are Acme's support agent ({tag}). " + POLICY, tag="cad1")
    found = expect_first(db, "cost_after_deploy", "cache.prefix_match")
    assert "v2" in found[0].title and "system" in found[0].title


def test_cost_after_deploy_silent_without_a_change(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    for deploy in ("v1", "v2"):
        with store(db, deploy=deploy):
            _calls(tmp_path, "You are Acme's support agent ({tag}). " + POLICY, tag="cad2")
    assert [f for f in findings(db, "cost_after_deploy") if f.stage == "cache.prefix_match"] == []


def _burst(srv, n: int, system: str, max_tokens: int = 24) -> list[BaseException]:
    c = client(srv)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            _ask(c, srv.model_id, f"{system} Ticket {i}.", max_tokens=max_tokens)
        except Exception as exc:  # 429s are the point of the test
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_degrades_under_traffic_names_admission(tmp_path: Path) -> None:
    srv = server("odd", tmp_path)
    with store(tmp_path / "t.duckdb") as db:
        errors = _burst(srv, 10, "You are a support agent (dut1).", max_tokens=48)
    assert errors, "a one-slot server with a queue of two should turn some of ten requests away"
    expect_first(db, "degrades_under_traffic", "arrival.admission")


def test_degrades_under_traffic_silent_one_at_a_time(tmp_path: Path) -> None:
    srv = server("odd", tmp_path)
    c = client(srv)
    with store(tmp_path / "t.duckdb") as db:
        for i in range(4):
            _ask(c, srv.model_id, f"You are a support agent (dut2). Ticket {i}.")
    assert findings(db, "degrades_under_traffic") == []


def test_eviction_under_load_names_eviction(tmp_path: Path) -> None:
    srv = server("odd", tmp_path)
    c = client(srv)
    first = "You are a support agent (evl1). " + POLICY
    with store(tmp_path / "t.duckdb") as db:
        _ask(c, srv.model_id, first)
        _ask(c, srv.model_id, first)  # hits: the prefix is resident
        for i in range(6):  # other prompts fill the 48-block pool and push it out
            _ask(c, srv.model_id, f"Ticket {i} (evl1) " + POLICY.replace("30", str(40 + i)))
        _ask(c, srv.model_id, first)  # misses now
    expect_first(db, "eviction_under_load", "cache.eviction")


def test_eviction_under_load_silent_with_room(tmp_path: Path) -> None:
    srv = server()
    c = client(srv)
    first = "You are a support agent (evl2). " + POLICY
    with store(tmp_path / "t.duckdb") as db:
        for _ in range(4):
            _ask(c, srv.model_id, first)
    assert findings(db, "eviction_under_load") == []
