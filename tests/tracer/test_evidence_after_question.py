"""Passages after the question, no line naming them (tracer/reading/evidence_run.py ``after_question``,
passage_recurrence.py): read as retrieved passages only when the system prompt tells the model to answer
from material and a passage comes back beside other passages; text a user pastes is new each call, or comes
back with the same neighbours."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmtrace.tracer.reading import evidence_shape
from llmtrace.tracer.reading.memory import memory

FACTS = [
    "The Larch Street pool opens its lanes to club swimmers from six until eight on weekday mornings.",
    "Lockers take a one-pound coin, which is returned when the key goes back into the lock.",
    "Children under eight swim only with an adult in the water beside them, whatever the session.",
    "The sauna closes for cleaning every Monday from noon, and reopens on Tuesday at seven.",
]
SYSTEM = "Answer members' questions using the leisure centre's help pages."


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    memory.passages.clear()
    yield
    memory.passages.clear()


def _read(system: str, ask: str, picked: list[int], sep: str = "\n\n") -> tuple[str, str, int] | None:
    found = evidence_shape.read([("system", system), ("user", ask + "\n\n" + sep.join(FACTS[k] for k in picked))])
    return None if found is None else (found[0].id_scheme, found[1], found[0].unlabelled)


def test_passages_a_search_returns_again_beside_others_are_read_from_the_second_call() -> None:
    assert _read(SYSTEM, "When can I swim laps?", [0, 1, 2]) is None  # nothing seen yet: could be pasted text
    assert _read(SYSTEM, "Do I need a coin?", [1, 2, 3]) == ("none", "user", 3)
    assert _read(SYSTEM, "Is the sauna open today?", [3, 0, 1], "\n---\n") == ("none", "user", 3)


def test_the_same_text_asked_about_again_is_no_retrieval() -> None:
    for ask in ("Can you shorten this?", "Please translate this into Welsh.", "Is this clear enough?"):
        assert _read(SYSTEM, ask, [0, 1, 2]) is None


def test_a_system_prompt_that_does_not_answer_from_material_reads_none() -> None:
    for system in ("You are a friendly assistant.", "You give feedback on the documents members write."):
        _read(system, "When can I swim laps?", [0, 1, 2])
        assert _read(system, "Do I need a coin?", [1, 2, 3]) is None


def test_an_opening_that_is_no_ask_reads_none() -> None:
    """The first paragraph a statement like the rest: the text is all passages or all prose, not an ask."""
    _read(SYSTEM, FACTS[3], [0, 1, 2])
    assert _read(SYSTEM, FACTS[0], [1, 2, 3]) is None
