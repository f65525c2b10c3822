"""Passages pasted after the question with no line naming them: the app's system prompt says to answer from
its help centre, and each user turn is the question, then three retrieved passages (blank lines or rule lines
between them, no labels). ``llmtrace diagnose`` names ``intake.evidence_formatting``. Its twins are clean
(nothing above info): the same passages under "Article n (...)" lines or headings, and a support desk whose
users paste their own, different text after the question (nothing a search returned twice).

The real OpenAI SDK wrapped by ``instrument()`` against the in-process ``llmtrace serve`` (tiny model),
``llmtrace diagnose --json`` on the store.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analyzers_live import client, server, store

import llmtrace
from llmtrace.cli import main

pytestmark = pytest.mark.slow

SYSTEM = "You help passengers of the Skerry Line ferries, answering from the help centre."
KB = [
    "Cars must be at the Brodick terminal forty minutes before sailing, or their space is released to the "
    "standby queue without refund.",
    "Dogs travel free on the open car deck and in the pet lounge, but not in the main passenger saloons.",
    "Sailings cancelled for weather are rebooked onto the next crossing with space, at no charge to holders of a "
    "valid ticket.",
    "Island residents pay the resident fare on showing a permit card, which the ticket office renews each March.",
    "Bicycles are carried free on every route, although tandems and trailers pay the small vehicle fare.",
]
TITLES = ["Check-in", "Pets on board", "Weather cancellations", "Resident fares", "Bicycles"]
ASKS = ["Do I have to arrive early with a car?", "Can my dog come upstairs?", "What happens if the ferry is "
        "cancelled?", "I live on Arran, what do I pay?", "Can I bring my tandem?", "Is check-in different at "
        "weekends?"]
# what users of a support desk paste after their question: their own text, new each time
PASTED = [
    ["The booking page accepted the card payment and then showed a blank screen for about a minute.",
     "The confirmation e-mail never arrived, although the bank statement lists the charge twice.",
     "Calling the office gave a recorded message saying the lines were closed for the holiday."],
    ["The vehicle height entered on the form was two metres, which is what the registration document says.",
     "At the terminal the barrier measured the van at two metres ten because of the roof box.",
     "The staff asked for the difference in fare, which was paid in cash at the kiosk."],
    ["The app logs out every time the phone switches between the ship's wifi and mobile data.",
     "Boarding passes saved in the wallet stay visible, but the ones inside the app disappear.",
     "Reinstalling the app restored the account, though the saved passengers list was empty."],
]
Body = Callable[[int], str]


def _picked(i: int) -> list[int]:
    return [(i + k) % 5 for k in range(3)]


BODIES: dict[str, Body] = {
    "blank-lines": lambda i: "\n\n".join(KB[k] for k in _picked(i)),
    "rule-lines": lambda i: "\n".join(f"---\n{KB[k]}" for k in _picked(i)),
    "article-labels": lambda i: "\n\n".join(f"Article {k + 11} (updated 2026-03-0{k + 1}):\n{KB[k]}"
                                            for k in _picked(i)),
    "headings": lambda i: "\n\n".join(f"## {TITLES[k]}\n{KB[k]}" for k in _picked(i)),
    "pasted-by-users": lambda i: "\n\n".join(PASTED[i % 3]) if i < 3 else "\n\n".join(reversed(PASTED[i % 3][:2])),
}


def _findings(tmp: Path, body: Body) -> list[dict[str, Any]]:
    srv = server()
    c = client(srv)
    with store(tmp / "t.duckdb", capture="hashes") as db:
        for i in range(6):
            c.chat.completions.create(model=srv.model_id, max_tokens=4, messages=[
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{ASKS[i]}\n\n{body(i)}"}])
    llmtrace.force_flush()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return [f for f in json.loads(buf.getvalue())["findings"] if f["severity"] != "info"]


@pytest.mark.parametrize("layout", ["blank-lines", "rule-lines"])
def test_unlabelled_passages_after_the_question_are_found(tmp_path: Path, layout: str) -> None:
    found = _findings(tmp_path, BODIES[layout])
    assert found and found[0]["stage"] == "intake.evidence_formatting", [(f["stage"], f["title"]) for f in found]


@pytest.mark.parametrize("layout", ["article-labels", "headings", "pasted-by-users"])
def test_labelled_passages_or_pasted_text_after_the_question_are_clean(tmp_path: Path, layout: str) -> None:
    found = _findings(tmp_path, BODIES[layout])
    assert not found, [(f["stage"], f["title"]) for f in found]
