"""A per-request profile ahead of fixed text: an app that heads its system prompt with a profile built from a
fixed template, several changing values between short fixed words ("Member card LB-3A1F00, home branch
Quayside, joined 2012. On loan: ...") and then long fixed rules, breaks the prefix cache on every call.
The first difference is a short value, but the text after it differs again a few words later, so no single
field explains the loss: the whole stretch from the first value to the fixed rules is one changing window.
`llmtrace diagnose` must name it (a changing block of the system prompt, a move as the fix) with hashes capture
(from the middleware's divergence window) and with full capture (from the text), through the OpenAI SDK and
the Anthropic SDK.

Its clean twins: the same profile at the end of the system prompt, different questions after a fixed system
prompt, different documents after it, and a few profiled personas each reused.

Real parts only: the tiny model served in-process, the official SDKs wrapped by ``instrument()``,
``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

import llmtrace
from llmtrace.cli import main

RULES = ("You are the loans assistant of the Harlow Street Library. Check a title's availability before you promise "
         "it, explain the renewal rules (two renewals, none if someone holds the book), point members to the kiosks "
         "for returns, and never reveal another member's loans. Late fees are twenty pence a day for adults and "
         "nothing for children. Keep replies under a hundred words. ") * 3
TITLES = ["The Salt Road", "Winter Orchards", "A Field Guide to Moths", "Harbour Lights", "Notes on Bread",
          "Rivers of the North", "The Quiet Engine", "Glass Maps"]
BRANCHES = ("Eastgate", "Castle Hill", "Quayside", "Millbrook")
CALLS = 8


def _profile(rng: random.Random, i: int) -> str:
    """The signed-in member's profile: a fixed template, a value every few words, ~200-300 chars."""
    return (f"Member card LB-{rng.randrange(10**5):05d}, home branch {rng.choice(BRANCHES)}, joined "
            f"{rng.randrange(2005, 2024)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}, {rng.randrange(6)} "
            f"loans overdue, tier {rng.choice(('Gold', 'Silver', 'Bronze'))}. On loan: {TITLES[i % 8]} (due in "
            f"{rng.randrange(1, 21)} days), {TITLES[(i + 3) % 8]}. Fees owed: {rng.randrange(400) / 100:.2f} GBP.\n\n")


def _question(i: int) -> str:
    return f"Can I renew {TITLES[(i + 5) % 8]}? It is my request number {100 + i}."


Body = Callable[[random.Random, int], dict[str, Any]]  # the request body of call i


def _findings(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, sdk: str, body: Body,
              capture: str) -> list[dict[str, Any]]:
    """The cache findings above info of ``CALLS`` calls through ``sdk`` to the live tiny server."""
    db = tmp_path / "t.duckdb"
    srv = live.server()
    llmtrace.init(db=db, service_name="loans-desk", capture=capture, strict=True)
    rng = random.Random(case)  # values of its own per case: the server's cache and the middleware outlive a test
    try:
        if sdk == "openai":
            c = live.client(srv)
            for i in range(CALLS):
                c.chat.completions.create(model="tiny", temperature=0, max_tokens=2, **body(rng, i))
        else:
            import anthropic

            from llmtrace.adapters import instrument

            a = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))
            for i in range(CALLS):
                a.messages.create(model="tiny", max_tokens=2, **body(rng, i))
    finally:
        llmtrace.shutdown()
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    return [f for f in found if f["severity"] != "info"
            and (f["stage"] == "cache.prefix_match" or "cache.prefix_match" in f.get("stages", ()))]


def _openai_top(rng: random.Random, i: int) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": _profile(rng, i) + RULES},
                         {"role": "user", "content": _question(i)}]}


PLANTED: dict[str, tuple[str, Body, str]] = {
    "openai-hashes": ("openai", _openai_top, "hashes"),
    "openai-full": ("openai", _openai_top, "full"),
    "anthropic-hashes": ("anthropic", lambda rng, i: {
        "system": _profile(rng, i) + RULES, "messages": [{"role": "user", "content": _question(i)}]}, "hashes"),
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_profile_ahead_of_fixed_rules_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 case: str) -> None:
    sdk, body, capture = PLANTED[case]
    found = _findings(tmp_path, capsys, case, sdk, body, capture)
    assert found, f"{case}: no cache finding"
    f = found[0]
    assert f["stage"] == "cache.prefix_match" and f["severity"] in ("warning", "critical"), (f["severity"], f["title"])
    assert "changing block" in f["title"] and "of the system" in f["title"], f["title"]
    assert "Move the changing block after the fixed text" in f["next_check"], f["next_check"]
    assert "intake.system_prompt" in f["stages"], f["stages"]


PERSONAS = [_profile(random.Random(f"persona {k}"), k) for k in range(4)]

CLEAN: dict[str, tuple[str, Body, str]] = {
    "profile-at-end": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": RULES + "\n" + _profile(rng, i)}, {"role": "user", "content": _question(i)}]},
        "hashes"),
    "profile-at-end-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": RULES + "\n" + _profile(rng, i)}, {"role": "user", "content": _question(i)}]},
        "full"),
    "anthropic-profile-at-end": ("anthropic", lambda rng, i: {
        "system": RULES + "\n" + _profile(rng, i), "messages": [{"role": "user", "content": _question(i)}]}, "hashes"),
    # the values in the user's own question, after a fixed system prompt
    "profile-in-the-question": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": RULES}, {"role": "user", "content": _profile(rng, i) + _question(i)}]}, "hashes"),
    # different documents after the fixed rules
    "documents-after-fixed-system": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": RULES},
        {"role": "user", "content": " ".join(rng.choice(TITLES) for _ in range(120)) + "\n" + _question(i)}]},
        "hashes"),
    # a few members' profiles ahead of the rules, each reused: one miss per profile, hits after that
    "reused-profiles": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": PERSONAS[i % 4] + RULES}, {"role": "user", "content": _question(i)}]}, "hashes"),
    # a few short personas (a name and a topic, narrower than a profile) ahead of the rules, each reused
    "reused-short-personas": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": f"Persona {i % 4}: you handle {BRANCHES[i % 4]} loans. " + RULES},
        {"role": "user", "content": _question(i)}]}, "hashes"),
    "reused-profiles-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": PERSONAS[i % 4] + RULES}, {"role": "user", "content": _question(i)}]}, "full"),
}


@pytest.mark.parametrize("case", list(CLEAN))
def test_a_profile_after_the_fixed_text_is_not_a_cache_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               case: str) -> None:
    sdk, body, capture = CLEAN[case]
    found = _findings(tmp_path, capsys, case, sdk, body, capture)
    assert not found, [(f["severity"], f["title"]) for f in found]
