"""The volatile-looking values a hashed prompt segment lists (class, exact offset, length): the shapes the
cache analysis names without the text."""

from __future__ import annotations

import pytest

from llmtrace.tracer.reading.prompt_segments import fields


@pytest.mark.parametrize("text, expected", [
    ("Local time 10:05, please", ("timestamp", 11, 5)),
    ("Opened at 9:07 PM by the desk", ("timestamp", 10, 7)),
    ("stamp 16:05:38.2 ok", ("timestamp", 6, 10)),
    ("Now: 2026-12-01T10:00:00Z. You help.", ("timestamp", 5, 20)),
    ("req 3f2a9c1e-77b0-4d1a-9e55-0c1d2e3f4a5b here", ("uuid", 4, 36)),
    ("Session started 1764580000.", ("epoch", 16, 10)),
    ("mail ann.lee+x@example.org now", ("email", 5, 21)),
])
def test_a_segment_lists_its_volatile_values_exactly(text: str, expected: tuple[str, int, int]) -> None:
    assert (expected[0], expected[1], expected[2]) in [(f["class"], f["at"], f["chars"]) for f in fields(text)]


def test_a_plain_sentence_lists_nothing_and_the_text_is_never_kept() -> None:
    assert fields("You answer for the claims desk in at most three sentences.") == []
    listed = fields("Ticket opened 2026-11-30 10:00 for the claims desk.")
    assert listed and all(set(f) == {"class", "at", "chars", "before", "after"} for f in listed)
    assert all("claims" not in str(f["before"]) + str(f["after"]) for f in listed)  # keyed hashes, not text
