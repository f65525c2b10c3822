"""Hold-out invisible characters: bidi controls and a BOM pasted into the user's turn (an owner reference
copied from a web form), one kind a call. Six calls are six prompts: the middleware and the server each
count the same prompt's characters, and the finding must count passes, not the two spans. The twin: the same
calls with the reference typed clean. The real OpenAI SDK through ``instrument()``, the real backend,
``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import analyzers_live as live
import pytest

from llmtrace.cli import main

DESK = ("You are the front desk of a veterinary clinic. Confirm the pet's name before booking and never give "
        "dosage advice. ") * 2
MARKS = ["\u202e", "\u2066", "\u200f\u200f", "\u202a", "\ufeff", "\u2067"]


@pytest.mark.parametrize("dirty", [True, False], ids=["pasted", "typed"])
def test_bidi_controls_in_the_user_turn_count_once_a_call(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          dirty: bool) -> None:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    with live.store(db, capture="hashes"):
        c = live.client(srv)
        for i, mark in enumerate(MARKS):
            c.chat.completions.create(model="tiny", temperature=0, max_tokens=3, messages=[
                {"role": "system", "content": DESK},
                {"role": "user", "content": f"Owner ref{mark if dirty else ''} 55{i}: can Biscuit come on Friday?"}])
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    norm = [f for f in found if f["stage"] == "intake.normalization"]
    if not dirty:
        assert not norm, norm
        return
    assert norm and norm[0]["severity"] == "warning" and found[0] == norm[0], found
    assert norm[0]["title"].startswith("6 prompts carried invisible characters"), norm[0]["title"]
    prompts = next(e for e in norm[0]["evidence"] if e["label"].startswith("prompts with invisible"))
    assert prompts["value"] == 6 and prompts["unit"] == "of 6", prompts
