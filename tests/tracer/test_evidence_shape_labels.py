"""Labelled retrieved passages read as labelled, whatever the app calls its tags or ids, and unlabelled
look-alikes (notes without an index, steps, rules, bullets, checklists) still read as unlabelled. A hold-out
probe found clean apps raising "mixed several retrieved chunks without labels" for ``<note id=...>``,
``tax-0: ...`` and ``- [0] ...`` passages, and later for ``Note 3: ...`` (an index label: see
test_evidence_shape_index_labels.py)."""

from __future__ import annotations

import pytest

from llmtrace.tracer.reading.evidence_shape import shape

PASSAGES = [
    "Wharf 9 takes refrigerated containers only between six and ten in the morning on weekdays.",
    "Consignments held at customs for more than five days are charged a storage fee per pallet.",
    "The northern yard gate closes at noon on Saturdays; drivers arriving later are turned away.",
]
IDS = ["tax-0", "tax-1", "tax-2"]


def _read(lines: list[str], cue: str = "Relevant notes:") -> tuple[str, str, int, int]:
    s = shape([cue + "\n" + "\n".join(lines) + "\n\nWhen does the northern gate close?"])
    assert s is not None, "the passages were not found at all"
    return s.id_scheme, s.delimiter, s.unlabelled, s.chunks_in


@pytest.mark.parametrize(("tag", "attr"), [
    ("note", "id"), ("record", "id"), ("entry", "key"), ("fact", "ref"), ("clause", "name"),
    ("memo", "source"), ("kb-item", "doc_id"), ("Card", "data-key"),
])
def test_any_repeated_tag_with_an_id_attribute_labels_its_passages(tag: str, attr: str) -> None:
    lines = [f'<{tag} {attr}="{i}">{p}</{tag}>' for i, p in zip(IDS, PASSAGES, strict=True)]
    assert _read(lines) == ("source_id", "xml", 0, 3)


def test_generic_tags_inside_a_container_are_the_passages() -> None:
    body = "<notes>\n" + "\n".join(f'<note id="{i}">{p}</note>' for i, p in zip(IDS, PASSAGES, strict=True))
    assert _read([body + "\n</notes>"]) == ("source_id", "xml", 0, 3)


@pytest.mark.parametrize("fmt", [
    "{i}: {p}", "Note {i}: {p}", "Ticket KB{n}: {p}", "kb_{n}: {p}", "A{n}: {p}", "refund-policy-v{n}: {p}",
    "faq-entry-x{n}: {p}",
])
def test_an_id_like_token_before_a_colon_labels_a_passage(fmt: str) -> None:
    lines = [fmt.format(i=i, n=n, p=p) for n, (i, p) in enumerate(zip(IDS, PASSAGES, strict=True))]
    scheme, delimiter, unlabelled, n = _read(lines)
    assert (scheme, delimiter, unlabelled, n) == ("source_id", "label", 0, 3)


@pytest.mark.parametrize(("fmt", "scheme"), [
    ("- [{n}] {p}", "index"), ("* [{n}] {p}", "index"), ("• [{i}] {p}", "source_id"), ("- ({n}) {p}", "index"),
    ("- Doc {n}: {p}", "source_id"), ("- {i}: {p}", "source_id"), ("[{i}] {p}", "source_id"), ("({n}) {p}", "index"),
])
def test_a_bullet_before_a_label_keeps_the_label(fmt: str, scheme: str) -> None:
    lines = [fmt.format(i=i, n=n, p=p) for n, (i, p) in enumerate(zip(IDS, PASSAGES, strict=True))]
    assert _read(lines) == (scheme, "label", 0, 3)


@pytest.mark.parametrize("fmt", [
    "{p}",  # plain lines
    "Note: {p}", "Warning: {p}", "Tip: {p}", "Follow-up: {p}",  # a word and a colon names no passage
    "Step {n}: {p}", "Rule {n}: {p}",  # a word that numbers instructions names no source
    "- {p}", "* {p}", "• {p}",  # bullets without labels
    "- [ ] {p}", "- [x] {p}",  # checklist boxes
    "<p>{p}</p>", "<li>{p}</li>",  # tags that carry no id
])
def test_unlabelled_look_alikes_stay_unlabelled(fmt: str) -> None:
    lines = [fmt.format(n=n + 1, p=p) for n, p in enumerate(PASSAGES)]
    scheme, _, unlabelled, n = _read(lines)
    assert (scheme, unlabelled, n) == ("none", 3, 3)


def test_plain_paragraphs_stay_unlabelled() -> None:
    s = shape(["Context:\n\n" + "\n\n".join(PASSAGES) + "\n\nWhen does the northern gate close?"])
    assert s is not None and (s.id_scheme, s.delimiter, s.unlabelled) == ("none", "none", 3)


def test_one_tag_with_an_id_is_not_a_passage_wrapper() -> None:
    # a single <span id=...> in a prompt is markup, not a list of passages; without a cue there are none
    text = f'<span id="hint">{PASSAGES[0]}</span> and then {PASSAGES[1]} {PASSAGES[2]}'
    assert shape([text]) is None


def test_id_labelled_duplicates_are_still_counted() -> None:
    lines = [f"{i}: {PASSAGES[0]}" for i in IDS]  # the same passage three times under three ids
    s = shape(["Relevant notes:\n" + "\n".join(lines) + "\n\nWhen?"])
    assert s is not None and (s.chunks_in, s.chunks_out, s.duplicates, s.unlabelled) == (3, 1, 2, 0)


def test_a_passage_label_line_is_no_cue() -> None:
    """'Document 3 (updated 2026-01-01):' heads its own passage: read as the cue, it left the first passage
    without its label (an unlabelled, undelimited block in a clean app's prompt)."""
    text = "When does the northern gate close?\n\n" + "\n\n".join(
        f"Document {n + 3} (updated 2026-01-0{n + 1}):\n{p}" for n, p in enumerate(PASSAGES))
    s = shape([text])
    assert s is None or s.unlabelled == 0, s
    s = shape(["Context:\n\n" + text.split("\n\n", 1)[1]])
    assert s is not None and (s.id_scheme, s.delimiter, s.unlabelled) == ("source_id", "label", 0), s


@pytest.mark.parametrize(("key", "expect"), [(None, ("none", "json", 3)), ("doc_id", ("source_id", "json", 0))])
def test_json_passages_on_the_cue_line_are_read(key: str | None, expect: tuple[str, str, int]) -> None:
    import json
    docs = [{key: i, "text": p} if key else {"text": p} for i, p in zip(IDS, PASSAGES, strict=True)]
    s = shape(["When does the northern gate close?\n\nDocuments: " + json.dumps(docs)])
    assert s is not None and (s.id_scheme, s.delimiter, s.unlabelled) == expect, s


@pytest.mark.parametrize("cue", ["Help centre:", "From the staff handbook:", "Wiki:"])
def test_a_help_centre_or_handbook_names_its_material(cue: str) -> None:
    assert _read([f"- {p}" for p in PASSAGES], cue=cue) == ("none", "none", 3, 3)


@pytest.mark.parametrize("tag", ["note", "record", "kb-entry"])
def test_a_repeated_bare_tag_wraps_unlabelled_passages(tag: str) -> None:
    """``<note>...</note>`` around each passage, no id, no cue line (a session-15 hold-out probe found none):
    passages in tags, none named. Markup and a prompt's own layout tags stay no passage wrapper."""
    text = "\n".join(f"<{tag}>{p}</{tag}>" for p in PASSAGES) + "\n\nWhen does the northern gate close?"
    s = shape([text])
    assert s is not None and (s.id_scheme, s.delimiter, s.unlabelled, s.chunks_in) == ("none", "xml", 3, 3)


def test_repeated_layout_tags_are_no_passages() -> None:
    text = "\n".join(f"<example>{p}</example>" for p in PASSAGES) + "\n\nWhen does the northern gate close?"
    assert shape([text]) is None
