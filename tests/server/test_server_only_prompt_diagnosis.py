"""A store of ``llmtrace serve`` alone (the app calls it with the plain OpenAI SDK, no ``instrument()``)
tells which value or block of the prompt moved, as an instrumented app's store does: the server records
each message's segment with its volatile-looking values located and, for a long one, its content-defined
pieces; offsets are told from the message's own start, not the chat template's text ahead of it."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from testkit import diagnose_json, start_server, stop_server

pytestmark = pytest.mark.slow

POLICY = ("You answer for Larkspur Freight's claims desk. Quote the claim number the customer gave, say which "
          "document is still missing, and never promise a payout date. If the customer is angry, apologise once. "
          "Escalate anything about hazardous goods to a human supervisor. Keep answers under eighty words. ") * 3
QUESTIONS = ["My pallet arrived crushed, claim C-{n}.", "Did you get my photos for C-{n}?",
             "Why is C-{n} still open?", "What else do you need for C-{n}?"]


def _profile(i: int) -> str:
    rng = random.Random(i)  # a member's profile: different for every caller
    keys = ("tier", "region", "consent", "plan", "segment", "locale", "channel", "risk", "tenure", "basket",
            "returns", "disputes", "emails", "sms")
    return "Member profile: " + ", ".join(f"{k}={rng.choice(['gold', 'north', 'yes', 'no'])}-{rng.randint(10, 999)}"
                                          for k in keys)


def _system(layout: str, i: int) -> str:
    if layout == "clock":
        return f"Current time: 2026-12-02T11:{i:02d}:{7 * i % 60:02d}. {POLICY}"
    if layout == "spelt_clock":  # the year ahead of the time is listed too, and stays the same
        return f"Today is Wednesday 2 December 2026, 9:{10 + 3 * i:02d} AM. {POLICY}"
    if layout == "two_part_id":  # two values back to back: neither alone has the same text after it each call
        return f"Request id {i * 7919:08x}-{i * 104729:06x}. {POLICY}"
    if layout == "profile_top":
        return f"{_profile(i)}\n\n{POLICY}"
    return f"{POLICY}\n\n{_profile(i)}"  # the twin: the profile after the fixed rules


def _serve_and_diagnose(tmp: Path, layout: str, capsys: Any) -> list[dict[str, Any]]:
    tmp.mkdir(parents=True, exist_ok=True)
    srv = start_server(tmp)
    try:
        c = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0)
        model = c.models.list().data[0].id
        for i in range(8):
            c.chat.completions.create(model=model, max_tokens=4, temperature=0, messages=[
                {"role": "system", "content": _system(layout, i)},
                {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)].format(n=100 + i)}])
        time.sleep(1.0)  # the server's exporter flushes on a timer; stop_server also flushes on exit
    finally:
        stop_server(srv)
    return [f for f in diagnose_json(srv.db_path, capsys) if f["severity"] != "info"]


@pytest.mark.parametrize(("layout", "where"), [("clock", "timestamp at char 14 of the system"),
                                               ("two_part_id", "at char 11 of the system"),
                                               ("spelt_clock", "timestamp at char 36 of the system")])
def test_a_changing_value_is_named_at_its_place_in_the_message(tmp_path: Path, capsys: Any, layout: str,
                                                               where: str) -> None:
    found = _serve_and_diagnose(tmp_path, layout, capsys)
    assert found and found[0]["stage"] == "cache.prefix_match", found
    assert where in found[0]["title"], found[0]["title"]


def test_a_changing_block_ahead_of_fixed_rules_is_found_and_its_twin_is_clean(tmp_path: Path, capsys: Any) -> None:
    found = _serve_and_diagnose(tmp_path / "top", "profile_top", capsys)
    assert found and found[0]["stage"] == "cache.prefix_match", found
    assert "changing block" in found[0]["title"], found[0]["title"]
    assert _serve_and_diagnose(tmp_path / "after", "profile_after", capsys) == []


def test_a_restart_of_the_server_is_not_an_eviction(tmp_path: Path, capsys: Any) -> None:
    """The same store across two runs of the server (its default ./llmtrace.duckdb): after the restart the
    prefix cache starts empty, so the first calls that repeat the earlier run's prefix miss it. That is no
    eviction (the finding was critical before each pass recorded its server's lifetime)."""
    for _run in range(2):
        srv = start_server(tmp_path)
        try:
            c = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0)
            model = c.models.list().data[0].id
            for i in range(6):  # the second run repeats the first's prompts, each with its member's profile
                c.chat.completions.create(model=model, max_tokens=4, temperature=0, messages=[
                    {"role": "system", "content": _system("profile_after", i)},
                    {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)].format(n=100 + i)}])
        finally:
            stop_server(srv)
    found = diagnose_json(srv.db_path, capsys)
    assert [f for f in found if f["stage"] == "cache.eviction"] == [], found
    assert not [f for f in found if f["severity"] != "info"], found
