"""Hold-out conversations that open alike (probe s8): few-shot examples sent as user and assistant turns
ahead of every conversation, or a scripted greeting exchange, make each new conversation's first request
share its opening with the last conversation's. With no session named, the middleware must not take that
request for the old conversation's history rewritten (a compaction that "dropped" every fact the old one
held). The planted twin: the same app compacts for real, the summary dropping the booking and the vehicle.
The real OpenAI and Anthropic SDKs through ``instrument()``, the real backend, ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analyzers_live as live
import anthropic
import pytest

from llmtrace.adapters import instrument
from llmtrace.cli import main

DESK = ("You are the booking desk of a ferry line. Confirm the departure port, the date and the vehicle length "
        "before quoting, never promise a cabin upgrade, and keep each reply to one sentence. ") * 2
SHOTS = [("Can I take a van on the night sailing?", "Yes, vans up to six metres travel on the night sailing."),
         ("Is breakfast included?", "Breakfast is included in cabin fares only.")]
Msg = dict[str, Any]


def _conversation(say: Any, n: int, compact: bool, opening: list[Msg]) -> None:
    """Three turns of one customer, the model's answers carried on; the planted app then compacts."""
    hist: list[Msg] = list(opening)
    for q in (f"Booking FJ-{5510 + n} for the Bergen sailing.", f"The car is KL-{81 + n}-QZ, 4.6 metres.",
              "We travel with a dog."):
        hist.append({"role": "user", "content": q})
        hist.append({"role": "assistant", "content": say(hist) or "Noted."})
    if compact:
        say([*opening, {"role": "user", "content": "Summary so far: a booking with a car and a dog."},
             {"role": "assistant", "content": "Understood."}, {"role": "user", "content": "Which car did I give?"}])


def _openai(srv: Any) -> Any:
    c = live.client(srv)

    def say(messages: list[Msg]) -> str:
        r = c.chat.completions.create(model="tiny", temperature=0, max_tokens=4,
                                      messages=[{"role": "system", "content": DESK}, *messages])
        return str(r.choices[0].message.content or "")
    return say


def _anthropic(srv: Any) -> Any:
    c = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))

    def say(messages: list[Msg]) -> str:
        r = c.messages.create(model="tiny", max_tokens=4, system=DESK, messages=messages)
        return "".join(getattr(b, "text", "") for b in r.content)
    return say


OPENINGS = {
    "few_shot": [m for q, a in SHOTS for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})],
    "greeting": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hello! How can I help?"}],
}


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
@pytest.mark.parametrize("opening", sorted(OPENINGS))
@pytest.mark.parametrize("compact", [False, True], ids=["clean", "compacted"])
def test_conversations_that_open_alike_are_not_one_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             sdk: str, opening: str, compact: bool) -> None:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    with live.store(db, capture="hashes"):
        say = (_openai if sdk == "openai" else _anthropic)(srv)
        for n in range(3):
            _conversation(say, n, compact, OPENINGS[opening])
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    comp = [f for f in found if f["stage"] == "loop.compaction"]
    if not compact:
        assert not comp, comp
        return
    assert comp and found[0] == comp[0], [(f["severity"], f["stage"], f["title"]) for f in found]
    lossy = next(e for e in comp[0]["evidence"] if e["label"] == "compactions that lost facts")
    # one compaction a conversation, each of them dropping the booking, the port and the car
    assert (lossy["value"], lossy["unit"]) == (3, "of 3"), lossy
