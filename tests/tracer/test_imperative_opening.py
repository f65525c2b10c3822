"""Instructions against statements whose first word is a noun that is also a verb (evidence_run.imperative_opening):
a passage that opens "Return tickets ..." or "Check-in desks ..." was read as an instruction, and a paste of
retrieved passages holding one such was no paste at all (shape() None for every heading and label style)."""

from __future__ import annotations

import pytest

from llmtrace.tracer.reading.evidence_run import imperative_opening

STATEMENTS = [
    "Return tickets bought before the first of April include one free crossing to the island.",
    "Check-in desks close forty minutes before each sailing.",
    "Open days are held on the first Saturday of every month.",
    "Start times vary with the tide and are posted at the pier.",
    "Call charges from mobiles depend on the network.",
    "Follow-up visits are booked by the clinic, not the patient.",
    "Report cards go out to parents at the end of each term.",
]
INSTRUCTIONS = [
    "Return the form to the front desk.",
    "Check your balance is correct before you pay.",
    "Keep answers short when the user is in a hurry.",
    "Use notes that are relevant to the question.",
    "Answer questions about the ferry from the FAQ.",
    "Cite sources when they are available.",
    "Always answer in English.",
    "You must quote the account number.",
    "Make sure the answer is short.",
    "Give answers that are short.",
    "Don't promise refunds above fifty euros.",
    "Let's keep it brief.",
]


@pytest.mark.parametrize("sentence", STATEMENTS)
def test_a_statement_opening_with_a_verb_noun_is_not_an_instruction(sentence: str) -> None:
    assert not imperative_opening(sentence)


@pytest.mark.parametrize("sentence", INSTRUCTIONS)
def test_instructions_still_are(sentence: str) -> None:
    assert imperative_opening(sentence)
