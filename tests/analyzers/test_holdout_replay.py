"""Hold-out replay: a per-conversation id at the top of the system prompt, each conversation several turns
long (the corpus's windows all sit in one-shot calls). The recording reuses each conversation's history
within the conversation; only the system prompt is lost across conversations. The what-if replay of the
fix (the id moved after the stable part) must keep that reuse: it gave a hit rate *below* the recorded one
(0.684 against 0.695), advice whose own evidence said it would make things worse. The real OpenAI SDK
through ``instrument()``, the real backend, ``llmtrace diagnose --json`` through the CLI's entry point.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import analyzers_live as live
import pytest

from llmtrace.cli import main

RULES = ("You are Peg, the help agent of the Brackwater lending library. Check the member card before "
         "renewing a loan, never waive a fine above ten pounds, and keep each reply to two short sentences. ") * 3
TURNS = ["Can I renew The Hobbit again?", "What do I owe on my card?", "Is the story hour on?", "Thanks, bye."]


def test_a_per_conversation_id_replays_better_fixed_than_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "t.duckdb"
    with live.store(db, capture="hashes"):
        c = live.client(live.server())
        for _ in range(3):
            history = [{"role": "system", "content": f"conversation {uuid.uuid4().hex[:12]}\n" + RULES}]
            for turn in TURNS:
                history.append({"role": "user", "content": turn})
                c.chat.completions.create(model="tiny", messages=history, max_tokens=3, temperature=0)
                history.append({"role": "assistant", "content": "Sure."})
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["findings"][0]
    assert top["stage"] == "cache.prefix_match" and "of the system" in top["title"], top["title"]
    ev = {e["label"]: e for e in top["evidence"]}
    assert ev["what-if computed by"]["value"].startswith("replaying 12 recorded block-hash chains"), ev
    fixed = ev["hit rate if fixed"]
    # two conversations' system prompts (of three) would be served: well above the recorded rate
    assert fixed["value"] > fixed["baseline"] + 0.03, fixed
