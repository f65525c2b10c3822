"""Reference text the app wrote once is not retrieved passages. A support app whose system prompt says "Use
the company information below when you answer." over the same three paragraphs of company facts in every
request is clean: ``llmtrace diagnose`` gives it no ``intake.evidence_formatting`` finding. Passages that
change with the question (the same facts picked per question from a larger pool) are still found, and so
are identical passages sent in the user message, and prompts from a store written before the passages'
hash and placement were recorded. The real OpenAI SDK wrapped by ``instrument()`` against the in-process
``llmtrace serve`` (tiny model), ``llmtrace diagnose --json`` on the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from analyzers_live import client, server, store
from testkit import diagnose_json

import llmtrace
from llmtrace.tracer.reading import evidence_shape
from llmtrace.tracer.registry import names as N

pytestmark = pytest.mark.slow

INTRO = "You are the assistant of Harbourline Freight, answering customers by chat."
CUE = "Use the company information below when you answer."
FACTS = [
    "Harbourline Freight was founded in 1998 in Aberdeen and runs twelve depots across Scotland and the north of "
    "England. Its head office is on Market Street.",
    "Standard deliveries arrive within three working days; next-day delivery costs an extra nine pounds per parcel "
    "and must be booked before two in the afternoon.",
    "Customer service answers the phone from eight in the morning to six in the evening on weekdays, and from nine "
    "to one on Saturdays. It is closed on Sundays.",
    "Parcels over thirty kilograms travel on pallets and need a loading bay at the delivery address; the driver "
    "cannot carry them upstairs.",
    "Lost parcels are refunded at their declared value up to five hundred pounds once a trace has run for ten days.",
]
QUESTIONS = ["When do you open on Saturday?", "How much is next-day delivery?", "Where is your head office?",
             "Can the driver carry a heavy parcel upstairs?", "How long do standard deliveries take?"]


# help-centre articles a search picks per question, sent beside the fixed facts
ARTICLES = [
    "Claims for damaged parcels must be opened within fourteen days of delivery, with photos of the packaging and "
    "the contents.",
    "A parcel can be redirected to a depot for collection until the van leaves the depot on the delivery morning.",
    "Customs paperwork for parcels to Norway is filled in online; the parcel waits at Aberdeen until it is done.",
    "Drivers leave a card when nobody answers, and try again the next working day before the parcel returns.",
    "Saturday delivery is offered in Aberdeen, Dundee and Inverness only, for an extra twelve pounds.",
]


def _messages(layout: str, i: int) -> list[dict[str, str]]:
    fixed = "\n\n".join(FACTS[:3])
    if layout.startswith("reference_and_"):  # the fixed facts in the system prompt, and articles picked per question
        picked = [ARTICLES[(i + k) % len(ARTICLES)] for k in range(2)]
        if layout == "reference_and_labelled":
            picked = [f"[{n}] {a}" for n, a in enumerate(picked, 1)]
        return [{"role": "system", "content": f"{INTRO}\n\n{CUE}\n\n" + "\n\n".join(FACTS)},
                {"role": "user", "content": "Relevant articles:\n\n" + "\n\n".join(picked) + f"\n\n{QUESTIONS[i]}"}]
    if layout == "reference":  # the app's own facts, the same every call, in the system prompt
        return [{"role": "system", "content": f"{INTRO}\n\n{CUE}\n\n{fixed}"},
                {"role": "user", "content": QUESTIONS[i]}]
    if layout == "retrieved":  # three of the five picked per question: they change with it
        picked = "\n\n".join(FACTS[(i + k) % len(FACTS)] for k in range(3))
        return [{"role": "system", "content": f"{INTRO}\n\n{CUE}\n\n{picked}"},
                {"role": "user", "content": QUESTIONS[i]}]
    # "in_user": the same passages every call, but in the user's message
    return [{"role": "system", "content": INTRO},
            {"role": "user", "content": f"{CUE}\n\n{fixed}\n\n{QUESTIONS[i]}"}]


def _diagnose(tmp: Path, layout: str, capsys: Any) -> list[dict[str, Any]]:
    srv = server()
    c = client(srv)
    with store(tmp / f"{layout}.duckdb", capture="hashes") as db:
        for i in range(len(QUESTIONS)):
            c.chat.completions.create(model=srv.model_id, max_tokens=4, messages=_messages(layout, i))
    llmtrace.force_flush()
    return [f for f in diagnose_json(db, capsys) if f["severity"] != "info"]


def _evidence(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["severity"], f["title"]) for f in found if f["stage"] == "intake.evidence_formatting"]


def test_the_apps_own_reference_text_in_the_system_prompt_is_no_finding(tmp_path: Path, capsys: Any) -> None:
    assert _evidence(_diagnose(tmp_path, "reference", capsys)) == []


def test_articles_picked_per_question_beside_fixed_facts_are_read_not_the_facts(tmp_path: Path, capsys: Any) -> None:
    """The system prompt's fixed facts hold more passages than the user message's two articles; the articles
    are the retrieved ones (unlabelled: a finding; labelled [1], [2]: none)."""
    found = _diagnose(tmp_path, "reference_and_unlabelled", capsys)
    assert [s for s, _ in _evidence(found)] == ["critical"], found
    assert _evidence(_diagnose(tmp_path, "reference_and_labelled", capsys)) == []


@pytest.mark.parametrize("layout", ["retrieved", "in_user"])
def test_passages_that_change_or_sit_in_the_user_message_are_still_found(
    tmp_path: Path, capsys: Any, layout: str
) -> None:
    found = _diagnose(tmp_path, layout, capsys)
    assert found and found[0]["stage"] == "intake.evidence_formatting" and found[0]["severity"] == "critical", found
    assert "without labels" in found[0]["title"]


def test_a_store_without_the_passages_hash_is_judged_as_before(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = evidence_shape.values

    def old_writer(s: evidence_shape.EvidenceShape, placement: str | None = None) -> dict[str, object]:
        out = real(s, placement)  # as a writer before the hash and the placement were recorded
        return {k: v for k, v in out.items() if k not in (N.EVIDENCE_PASSAGES_HASH, N.EVIDENCE_PLACEMENT)}

    monkeypatch.setattr(evidence_shape, "values", old_writer)
    found = _diagnose(tmp_path, "reference", capsys)
    assert [s for s, _ in _evidence(found)] == ["critical"], found
