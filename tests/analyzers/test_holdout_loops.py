"""Hold-out loops: a tool the agent calls again with the same arguments once (a status re-checked, a
lookup retried after a pending answer) is no loop; the same call made over and over is. Both read from the
messages array the app sends back (the middleware's inference, ``llmtrace.loop.observed=wire``), through
the real OpenAI SDK wrapped by ``instrument()`` against the real backend, and ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

from llmtrace.cli import main

DESK = ("You are the front desk of a veterinary clinic. Confirm the pet's name before booking and never give "
        "dosage advice. ") * 2


REORDERED = ['{"pet": "Miso", "owner": "Ng"}', '{"owner":"Ng","pet":"Miso"}', '{ "pet" : "Miso", "owner" : "Ng" }',
             '{"owner": "Ng",\n "pet": "Miso"}', '{"pet":"Miso","owner":"Ng"}']


def _agent(db: Path, polls: int, reordered: bool = False) -> None:
    """Three conversations, each asking for the same record ``polls`` times before it answers (with
    ``reordered``, its arguments' keys in another order or other spacing each time)."""
    srv = live.server()
    with live.store(db, capture="hashes"):
        c = live.client(srv)
        for run in range(3):
            msgs: list[dict[str, Any]] = [{"role": "system", "content": DESK},
                                          {"role": "user", "content": f"Are Miso's lab results back? ref {run}"}]
            for step in range(polls):
                c.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0)
                cid = f"po_{run}_{step}"
                msgs = msgs + [
                    {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": {
                        "name": "pet_record", "arguments": REORDERED[step] if reordered else '{"pet": "Miso"}'}}]},
                    {"role": "tool", "tool_call_id": cid, "content": "pending" if step == 0 else "normal"}]
            c.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0)


def _diagnose(db: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return list(json.loads(capsys.readouterr().out)["findings"])


@pytest.mark.parametrize(("polls", "reordered"), [(2, False), (5, False), (5, True)],
                         ids=["rechecked-once", "stuck", "stuck-keys-reordered"])
def test_one_repeated_tool_call_is_no_loop_five_are(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    polls: int, reordered: bool) -> None:
    db = tmp_path / "t.duckdb"
    _agent(db, polls, reordered)
    found = _diagnose(db, capsys)
    loops = [f for f in found if f["stage"].startswith("loop.") and f["severity"] != "info"]
    if polls == 2:
        assert not loops, loops  # the result was pending, the agent asked once more: by design
        return
    assert loops and loops[0]["stage"] == "loop.budget", found
    assert loops[0]["title"].startswith("3 agent runs"), loops[0]["title"]  # three conversations, not their requests


def _lookups(db: Path, pets: list[str], parallel: bool) -> None:
    """An agent that looks up each of the owner's pets once (in one fan-out, or one a step), then answers."""
    srv = live.server()
    with live.store(db, capture="hashes"):
        c = live.client(srv)
        for run in range(2):
            msgs: list[dict[str, Any]] = [{"role": "system", "content": DESK},
                                          {"role": "user", "content": f"When are my pets due? owner {run}"}]
            batches = [pets] if parallel else [[p] for p in pets]
            for k, batch in enumerate(batches):
                c.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0)
                calls = [(f"f{run}_{k}_{j}", p) for j, p in enumerate(batch)]
                msgs = msgs + [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "pet_record", "arguments": json.dumps({"pet": p})}}
                    for cid, p in calls]}] + [{"role": "tool", "tool_call_id": cid, "content": f"{p}: due Friday"}
                                              for cid, p in calls]
            c.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0)


@pytest.mark.parametrize("parallel", [True, False], ids=["fan-out", "one-a-step"])
def test_one_tool_for_several_pets_is_no_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              parallel: bool) -> None:
    db = tmp_path / "t.duckdb"
    _lookups(db, ["Biscuit", "Miso", "Pepper", "Rolo", "Tansy"], parallel)
    loops = [f for f in _diagnose(db, capsys) if f["stage"].startswith("loop.") and f["severity"] != "info"]
    assert not loops, loops  # the same tool, other arguments each time: the work the user asked for
