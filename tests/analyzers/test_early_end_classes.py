"""The end kinds and cut classes both recorders of gen.stop share (tracer/reading/stop_context.py): a stop string
inside content is told from one at a natural end, from the output's own end and nothing else."""

from __future__ import annotations

import pytest

from llmtrace.tracer.reading import stop_context as sc


@pytest.mark.parametrize(("text", "before", "inside"), [
    ("The distance is 7", "digit", "none"),
    ("Upgrade to v2", "digit", "none"),
    ("It takes approx", "abbreviation", "none"),
    ("Bring documents, e.g", "abbreviation", "none"),
    ("Ask Dr", "abbreviation", "none"),
    ("```python\nx = 1", "digit", "code_fence"),
    ("```python\nprint('hi')", "punct", "code_fence"),
    ("Run this:\n~~~sql\nSELECT name FROM users", "letter", "code_fence"),  # markdown's other fence
    ("Run this:\n~~~sql\nSELECT 1\n~~~\nthen reload", "letter", "none"),  # a closed block is left behind
    ("Here is the fix:\n\n```js\nlet total = price", "letter", "code_fence"),  # plain text, then a block
    ('{"note": "see the manual', "letter", "json_string"),
    ('{"a": 1,', "punct", "json"),
    ("", "empty", "none"),
    ("The claim is approved.", "sentence_end", "none"),
    ('He said "done!"', "sentence_end", "none"),
    ('{"a": 1}', "punct", "none"),
    ("The claim is approved", "letter", "none"),
])
def test_cut_classes(text: str, before: str, inside: str) -> None:
    assert sc.preceded_by(text) == before
    assert sc.inside(text) == inside


def test_natural_ends_are_not_inside_content() -> None:
    assert not sc.inside_content("sentence_end", "none")
    assert not sc.inside_content("letter", "none")  # judged against the service's other answers instead
    assert not sc.inside_content("punct", "code_fence", "fence")  # a fence stop string closing the block
    assert sc.inside_content("punct", "code_fence", "newline")
    assert sc.inside_content("digit", "none") and sc.inside_content("letter", "json_string")
    # a marker the app chose ("~~~", "[[internal]]", "END") fires where the model wrote it on purpose
    assert not sc.inside_content("space", "json_string", "punct", 3)
    assert not sc.inside_content("space", "json_string", "mixed", 12)
    assert not sc.inside_content("digit", "none", "word", 3)
    assert sc.inside_content("digit", "json_string", "punct", 1)  # a comma
    # a newline after a number or after "No" ends the line, not the number or an abbreviation
    assert not sc.inside_content("digit", "none", "newline") and not sc.inside_content("abbreviation", "none", "newline")
    assert sc.inside_content("digit", "none", "period") and sc.inside_content("abbreviation", "none", "period")
    assert sc.inside_content("digit", "code_fence", "newline")  # inside a block all the same


@pytest.mark.parametrize(("stop", "cls"), [(".", "period"), ("\n", "newline"), ("\n\n", "blank_line"), ('"', "quote"),
                                           ("```", "fence"), ("END", "word"), ("<|im_end|>", "special"),
                                           ("~~~", "punct"), ("[[x1]]", "mixed"), (" ", "space")])
def test_stop_string_classes(stop: str, cls: str) -> None:
    assert sc.stop_string_class(stop) == cls


def test_end_kinds() -> None:
    assert sc.end_kind("length") == "length"
    assert sc.end_kind("stop", matched_stop_string=True) == "stop_string"
    assert sc.end_kind("stop", stop_strings_set=True) == "stop_unknown"  # OpenAI: stop string or end of turn
    assert sc.end_kind("stop", stop_strings_set=True, said_which=True) == "end_turn"
    assert sc.end_kind("stop") == "end_turn"
    assert sc.end_kind("tool_calls") == "tool_call"
    assert sc.end_kind("content_filter") == "content_filter"
    assert sc.end_kind(None, aborted=True) == "client_disconnect"
    assert set(sc.END_KINDS) >= {"length", "stop_string", "end_turn", "tool_call", "content_filter",
                                 "client_disconnect", "error"}
