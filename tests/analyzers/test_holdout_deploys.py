"""Hold-out deploys: cost up after a deploy that did not touch the cache (the corpus's deploys all moved a
volatile field up the prompt). A deploy that raised max_tokens, or made the system prompt longer, costs more
per call with the hit rate unchanged; ``diagnose`` must say so and name what moved, and must not read the
longer answers to the same prompts as nondeterminism. Each has a clean twin (the same two deploys, nothing
changed). The real OpenAI SDK through ``instrument()``, the real backend, ``llmtrace diagnose --json`` and
``llmtrace check`` through the CLI's entry point.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

from llmtrace.cli import main

DESK = ("You answer for the Quillmark lending library. Check the member card before renewing a loan, never "
        "waive a fine above ten pounds, and mention the Saturday story hour when children come up. ") * 2
ASKS = ["Can I renew The Hobbit again?", "What do I owe on card 88213?", "Is the study room free on Tuesday?"]


@pytest.fixture
def priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A price for the tiny model (the app's own price file, as a user with a negotiated rate has)."""
    with live.own_prices(tmp_path, monkeypatch, "holdout", cached_input=0.5):
        yield


def _deploys(db: Path, v2: dict[str, Any]) -> None:
    srv = live.server()
    for deploy, kw in (("v1", {}), ("v2", v2)):
        with live.store(db, deploy=deploy, capture="hashes"):
            c = live.client(srv)
            for i in range(6):
                system = DESK * kw.get("system_times", 1)
                c.chat.completions.create(model="tiny", temperature=0, max_tokens=kw.get("max_tokens", 4),
                                          messages=[{"role": "system", "content": system},
                                                    {"role": "user", "content": ASKS[i % 3] + kw.get("more", "")}],
                                          **({"tools": kw["tools"]} if "tools" in kw else {}))


def _diagnose(db: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return list(json.loads(capsys.readouterr().out)["findings"])


def _check(db: Path, capsys: pytest.CaptureFixture[str]) -> int:
    rc = main(["check", "--db", str(db), "--cost", "--deploy", "v2", "--baseline-deploy", "v1"])
    capsys.readouterr()
    return rc


@pytest.mark.parametrize("twin", [False, True], ids=["raised", "twin"])
def test_a_deploy_that_raised_max_tokens_costs_more_and_is_not_nondeterminism(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], priced: None, twin: bool) -> None:
    db = tmp_path / "t.duckdb"
    _deploys(db, {} if twin else {"max_tokens": 24})
    found = _diagnose(db, capsys)
    loud = [f for f in found if f["severity"] != "info"]
    assert not any(f["stage"] == "forward.batching" for f in found), found  # longer answers are by design
    if twin:
        assert not loud, loud
        assert _check(db, capsys) == 0
        return
    top = loud[0]
    assert top["stage"] == "meters.cache_accounting" and "gen.stop" in top["stages"], top
    assert "Cost per request rose" in top["title"] and "max_tokens 4 → 24" in top["title"], top["title"]
    assert _check(db, capsys) == 1


@pytest.mark.parametrize("twin", [False, True], ids=["longer", "twin"])
def test_a_longer_system_prompt_without_prices_is_counted_in_billed_tokens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], twin: bool) -> None:
    db = tmp_path / "t.duckdb"
    _deploys(db, {} if twin else {"system_times": 4})
    loud = [f for f in _diagnose(db, capsys) if f["severity"] != "info"]
    # `check --cost`, which diagnose's advice names, gates the same billed tokens where no price is known
    # (every call costs $0 on both sides: compared in dollars, it passed whatever the deploy did)
    rc = main(["check", "--db", str(db), "--cost", "--deploy", "v2", "--baseline-deploy", "v1"])
    out = capsys.readouterr().out
    assert "billed tokens per request (no price known)" in out, out
    if twin:
        assert not loud, loud
        assert rc == 0, out
        return
    assert rc == 1 and "FAIL billed tokens per request" in out, out
    assert loud and loud[0]["stage"] == "meters.cache_accounting", loud
    assert "Billed tokens per request rose" in loud[0]["title"] and "prompts got longer" in loud[0]["title"], loud
    assert "intake.system_prompt" in loud[0]["stages"]
    assert "(the system grew by ~" in loud[0]["title"], loud[0]["title"]


def test_tool_definitions_added_at_a_deploy_are_named_as_what_grew(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """v2 sends five tool definitions with every call: the bill rose and the title names the tools, not the
    system prompt that stayed as it was."""
    db = tmp_path / "t.duckdb"
    tools = [{"type": "function", "function": {
        "name": f"loan_{w}", "description": f"Return the {w} of a loan by member card and title, with the branch "
        "that holds the copy and the date it is due back.",
        "parameters": {"type": "object", "properties": {"card": {"type": "string"}}}}}
        for w in ("status", "fines", "holds", "history", "renewals")]
    _deploys(db, {"tools": tools})
    loud = [f for f in _diagnose(db, capsys) if f["severity"] != "info"]
    assert loud and loud[0]["stage"] == "meters.cache_accounting", loud
    assert "prompts got longer (the tools grew by ~" in loud[0]["title"], loud[0]["title"]


def test_a_raised_max_tokens_without_prices_weighs_the_answer_tokens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No price known (a self-hosted model): 20 more answer tokens on a ~100-token prompt are a 20% rise
    counted flat, a bill up by over half at any provider's ratio of output to input price."""
    db = tmp_path / "t.duckdb"
    _deploys(db, {"max_tokens": 24})
    loud = [f for f in _diagnose(db, capsys) if f["severity"] != "info"]
    assert loud and loud[0]["stage"] == "meters.cache_accounting", loud
    assert "Billed tokens per request rose" in loud[0]["title"] and "max_tokens 4 → 24" in loud[0]["title"], loud


def test_longer_questions_from_the_users_are_reported_not_blamed_on_the_deploy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The deploy sends what it sent before; the users wrote longer questions that week. The bill rose, and
    diagnose says so (info), naming the users' turns, not the deploy's prompt."""
    db = tmp_path / "t.duckdb"
    more = (" I borrowed it last month from the Eastside branch and renewed it twice already, but my daughter "
            "still needs it for a school project about dragons that is due next Friday, so please check.") * 2
    _deploys(db, {"more": more})
    found = _diagnose(db, capsys)
    assert not [f for f in found if f["severity"] != "info"], found
    (cost,) = [f for f in found if f["stage"] == "meters.cache_accounting"]
    assert "the users' own turns got longer" in cost["title"], cost["title"]
