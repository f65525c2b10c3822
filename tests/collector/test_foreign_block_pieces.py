"""A block that changes every call at the TOP of a prompt, ahead of long fixed text, found with hashes only.

A per-request card (a pet's record at a vet's front desk) heads the system prompt, ahead of the desk's fixed
instructions, so no call shares a cached prefix with the one before. Through a foreign instrumentation
(OpenInference's openai instrumentor) and ``llmtrace collect`` under the default capture (``hashes``) there is
no divergence window: the collector sees one span at a time, and the 64-char chunk chain, anchored at the
start, shares nothing between two such prompts. The content-defined pieces each long segment now records
(tracer/reading/prompt_segments.py) cut the same fixed text alike wherever it sits, so ``diagnose`` finds the
run behind the block (analyzers/cache/prompt_compare.py ``piece_run``) and names it: a changing block of ~N chars
ahead of ~M tokens of fixed text. The clean twins (the card after the instructions) get nothing above info.
The same for a block at the top of the user's message (OpenLLMetry), and for the same calls through
llmtrace's own middleware in hashes mode. Real packages, real ``llmtrace serve`` and ``llmtrace collect``,
``diagnose --json`` as a subprocess; not a word of a card reaches the store.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from collector_helpers import (
    ForeignApp,
    RunningCollector,
    diagnose_service,
    diagnose_services,
    query,
    send_foreign,
    start_collector,
)
from testkit import RunningServer

import llmtrace
from llmtrace.tracer.reading.prompt_segments import MAX_PIECES, prompt_attributes

DESK = ("You staff the front desk of the Hollowmere veterinary practice. Book the first free slot with the vet "
        "the owner asks for, ask whether the animal has eaten in the last six hours before any procedure, never "
        "suggest a dose of any medicine, and say that the practice closes at half past six. ") * 3
PETS = ("Biscuit", "Marlowe", "Pepper", "Juniper")
KINDS = ("a spaniel", "an elderly tabby", "a house rabbit", "a cockatiel")


def _card(rng: random.Random, i: int) -> str:
    return (f"Pet record: chip {rng.randrange(10**14, 10**15)}; {PETS[i % 4]}, {KINDS[i % 4]} of "
            f"{2 + i % 9} years; owner {('Ms Avery', 'Mr Okonkwo', 'Dr Saltmarsh')[i % 3]}; last visit "
            f"{4 + 3 * i} weeks ago for {('vaccinations', 'a dental check', 'a limp')[i % 3]}; "
            f"{('no allergies noted', 'allergic to penicillin')[i % 2]}.\n\n")


def _card_calls(twin: bool, seed: str = "") -> list[dict[str, Any]]:
    rng = random.Random(f"card-{twin}{seed}")
    out = []
    for i in range(8):
        card = _card(rng, i)
        system = DESK + "\n" + card if twin else card + DESK
        out.append({"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": f"Can {PETS[i % 4]} come in on day {i + 3}?"}],
                    "max_tokens": 5, "stream": i % 2 == 1})
    return out


RUBRIC = ("Grade the triage note below the way the practice's senior nurse would: say whether the urgency is "
          "right, name anything the note leaves out that a vet needs before seeing the animal, and keep the "
          "grade to one word from routine, soon, urgent or emergency. ") * 3


def _note_calls(twin: bool) -> list[dict[str, Any]]:
    """A triage note (changing) ahead of the fixed grading rubric in the user's own message; the twin sends
    the rubric first."""
    rng = random.Random(f"note-{twin}")
    out = []
    for i in range(8):
        note = "Triage note: " + _card(rng, i) + f"Owner reports {('vomiting', 'limping', 'not eating')[i % 3]}.\n\n"
        user = RUBRIC + "\n" + note if twin else note + RUBRIC
        out.append({"messages": [{"role": "system", "content": "You grade triage notes."},
                                 {"role": "user", "content": user}], "max_tokens": 5, "stream": i % 2 == 0})
    return out


APPS = {"card-top": ("openinference", _card_calls, False), "card-end": ("openinference", _card_calls, True),
        "note-top": ("openllmetry", _note_calls, False), "note-end": ("openllmetry", _note_calls, True)}


@pytest.fixture(scope="module")
def collected(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[RunningCollector, dict[str, list[dict[str, Any]]]]]:
    tmp = tmp_path_factory.mktemp("foreign-block-pieces")
    col = start_collector(tmp)  # the default capture: hashes
    try:
        apps = {service: ForeignApp(app, calls(twin)) for service, (app, calls, twin) in APPS.items()}
        send_foreign(col, tmp, tiny_server.base_url + "/v1", apps)
        yield col, diagnose_services(col.db, list(apps))
    finally:
        col.stop()


def _block(findings: list[dict[str, Any]]) -> tuple[int, int]:
    """The top finding's block: (chars, tokens of fixed text after it)."""
    top = findings[0]
    assert top["stage"] == "cache.prefix_match" and top["severity"] != "info", findings
    m = re.search(r"changing block of ~(\d+) chars .* ahead of ~(\d+) tokens of fixed text", top["title"])
    assert m, top["title"]
    return int(m.group(1)), int(m.group(2))


@pytest.mark.slow
def test_block_at_the_top_of_the_system_prompt_is_named_from_hashes(
        collected: tuple[RunningCollector, dict[str, list[dict[str, Any]]]]) -> None:
    _, found = collected
    width, fixed = _block(found["card-top"])
    cards = [len(_card(random.Random(0), i)) for i in range(8)]
    # the block's end is known to a piece (the first cut in the fixed text after it): a card's width up to a
    # few hundred chars more, never less than the shortest card's
    assert min(cards) - 64 <= width <= max(cards) + 400, (width, cards)
    assert 100 <= fixed <= 260, fixed  # DESK is ~820 chars, ~190 tokens of the tiny model
    assert "system" in found["card-top"][0]["title"]
    loud = [(f["severity"], f["stage"], f["title"]) for f in found["card-end"] if f["severity"] != "info"]
    assert not loud, loud


@pytest.mark.slow
def test_block_at_the_top_of_the_users_message_is_named_from_hashes(
        collected: tuple[RunningCollector, dict[str, list[dict[str, Any]]]]) -> None:
    _, found = collected
    _, fixed = _block(found["note-top"])
    assert 100 <= fixed <= 260, fixed
    loud = [(f["severity"], f["stage"], f["title"]) for f in found["note-end"] if f["severity"] != "info"]
    assert not loud, loud


@pytest.mark.slow
def test_pieces_on_record_and_no_card_text(
        collected: tuple[RunningCollector, dict[str, list[dict[str, Any]]]]) -> None:
    col, _ = collected
    rows = query(col.db, "SELECT s.attributes->>'llmtrace.prompt.segments' FROM passes p JOIN spans s "
                         "ON s.span_id = p.span_id WHERE p.service = 'card-top'")
    assert len(rows) == 8
    for (raw,) in rows:
        system = json.loads(str(raw))[0]
        assert system["kind"] == "system" and system["pieces"], system
        assert sum(int(x.split(":")[1]) for x in system["pieces"]) == system["chars"]
    leaks = query(col.db, "SELECT service, name FROM spans WHERE attributes LIKE '%Hollowmere%' "
                          "OR attributes LIKE '%Pet record%' OR attributes LIKE '%Saltmarsh%' "
                          "OR events LIKE '%Hollowmere%' OR events LIKE '%Pet record%'")
    assert not leaks, leaks


@pytest.mark.slow
@pytest.mark.parametrize("twin", [False, True])
def test_own_middleware_in_hashes_mode_names_the_same_block(tiny_server: RunningServer, tmp_path: Path,
                                                            twin: bool) -> None:
    """The card app through ``llmtrace.instrument`` (capture hashes, strict registry) instead."""
    db = tmp_path / "own.duckdb"
    llmtrace.init(db=db, service_name="own", capture="hashes", strict=True)
    try:
        client = llmtrace.instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x",
                                                   max_retries=0))
        for c in _card_calls(twin, seed="own"):  # other cards: the server has not cached these prompts
            kw = {"model": "tiny", "messages": c["messages"], "max_tokens": c["max_tokens"], "temperature": 0}
            if c["stream"]:
                for _ in client.chat.completions.create(**kw, stream=True):
                    pass
            else:
                client.chat.completions.create(**kw)
    finally:
        llmtrace.shutdown()
    found = diagnose_service(db, "own")
    if twin:
        assert not [f for f in found if f["severity"] != "info"], found
    else:
        _block(found)


def _system_record(text: str) -> dict[str, Any]:
    attrs = prompt_attributes([("system", text)], "hashes")
    return dict(json.loads(str(attrs["llmtrace.prompt.segments"]))[0])


def test_pieces_resynchronise_after_a_block_and_stay_small() -> None:
    """The recorder's own guarantees: the fixed text after a changed block is cut and hashed alike in both
    prompts; a 100k-char prompt (prose, or one base64 blob) keeps a few KB of pieces."""
    a = _system_record(_card(random.Random(1), 0) + DESK)
    b = _system_record(_card(random.Random(2), 5) + DESK)
    pa, pb = a["pieces"], b["pieces"]
    shared = 0
    while shared < min(len(pa), len(pb)) and pa[-1 - shared] == pb[-1 - shared]:
        shared += 1
    assert sum(int(x.split(":")[1]) for x in pa[len(pa) - shared:]) >= len(DESK) - 300, (pa, pb)
    assert a["chunk_hashes"][0] != b["chunk_hashes"][0]  # the anchored chain shares nothing
    rng = random.Random(3)
    prose = " ".join(rng.choice(DESK.split()) + ("." if rng.random() < 0.1 else "") for _ in range(20000))[:100_000]
    blob = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(100_000))
    for text in (prose, blob):
        rec = _system_record(text)
        assert len(rec["pieces"]) < 2 * MAX_PIECES and len(json.dumps(rec["pieces"])) < 8_000, len(rec["pieces"])
        assert sum(int(x.split(":")[1]) for x in rec["pieces"]) == len(text)
    assert "pieces" not in _system_record("short system prompt")  # a short segment holds no block worth moving
