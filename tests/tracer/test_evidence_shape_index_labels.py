"""Index labels of retrieved passages ("Note 3:", "Entry 2 —", "FAQ 12)", "[3]", "#4", titles, a source named
at the end, numbered or indexed tags) read as labels, in one line or as a label heading its own block, while
numbered instruction lists ("Step 1: Greet the customer.", "1. Always cite the id.", "Note 1: Never guess.")
stay instructions: they label nothing and are not counted as passages. A clean RAG twin whose passages were
"Note n:" / "Entry n —" / "FAQ n)" got a critical "mixed several retrieved chunks without labels" finding."""

from __future__ import annotations

import pytest

from llmtrace.tracer.reading.evidence_shape import EvidenceShape, shape

FACTS = [
    "Wharf 9 takes refrigerated containers only between six and ten in the morning on weekdays.",
    "Consignments held at customs for more than five days are charged a storage fee per pallet.",
    "The northern yard gate closes at noon on Saturdays; drivers arriving later are turned away.",
    "Hazardous goods need a declaration signed by the shipper before they may enter the terminal.",
]
TITLES = ["Reefer slots", "Customs storage", "Weekend gate", "Hazardous goods"]
INSTRUCTIONS = [
    "Always cite the passage you used in square brackets after each sentence.",
    "Never answer from memory when the passages do not cover the question.",
    "Keep the answer under eighty words and write in plain English.",
    "If the passages disagree, say so and name both of them in your reply.",
]
QUESTION = "When does the northern gate close?"


def _read(body: str, cue: str = "Knowledge base passages:") -> EvidenceShape | None:
    return shape([f"{cue}\n{body}\n\n{QUESTION}"])


def _lines(fmt: str, sep: str, items: list[str] = FACTS) -> str:
    return sep.join(fmt.format(n=n + 1, p=p, t=TITLES[n], a="ABCD"[n], r=("I", "II", "III", "IV")[n])
                    for n, p in enumerate(items))


LABELLED = [
    "[{n}] {p}", "#{n} {p}", "Doc {n} — {p}", "Entry {n} - {p}", "Entry {n} — {p}", "FAQ {n}) {p}", "Note {n}: {p}",
    "Note {a}: {p}", "Item #{n}: {p}", "Item No. {n}: {p}", "Excerpt {r}. {p}", "Passage {n}. {p}", "Article {n}: {p}",
    "Result {n} | {p}", "Chunk {n}: {p}", "Section {n}.1: {p}", "**Note {n}**: {p}", "**Source {n}:** {p}",
    "- Entry {n}: {p}", "Note {n} (handbook.pdf): {p}", "Memo {n}: {p}", "Card {n} — {p}",
    "Quelle {n}: {p}", "Fuente {n}: {p}", "Extrait {n} : {p}", "Документ {n}: {p}", "文档{n}：{p}",
    "{p} (source: handbook-{n}.pdf)", "{p} [source: kb-{n}]", "{p} (https://kb.example.com/a/{n})",
    "Search result {n}: {p}", "Knowledge base article {n}: {p}", "Document {n} of 4: {p}", "handbook-{n}.pdf: {p}",
    "From handbook-{n}.pdf (p. 3): {p}", "Passage #{n} — {p}", "Ref. {n}: {p}",
]


@pytest.mark.parametrize("sep", ["\n", "\n\n"], ids=["lines", "paragraphs"])
@pytest.mark.parametrize("fmt", LABELLED)
def test_index_labels_label_their_passages(fmt: str, sep: str) -> None:
    s = _read(_lines(fmt, sep))
    assert s is not None and s.chunks_in == 4
    assert s.id_scheme != "none" and s.unlabelled == 0 and s.delimiter != "none", (fmt, s)


@pytest.mark.parametrize("fmt", [
    "Note {n}:\n{p}", "Note {n}:\n\n{p}", "Entry {n} —\n{p}", "## Doc {n}\n{p}", "### {t}\n{p}", "### {t}\n\n{p}",
    "**{t}**\n{p}", "Source: handbook-{n}.pdf\n{p}", "{p}\nSource: handbook-{n}.pdf", "Title: {t}\n{p}",
    "### Yard rule {n}\n{p}",  # a heading is a title whatever its last word
])
def test_a_label_heading_its_own_block_labels_the_block(fmt: str) -> None:
    for sep in ("\n", "\n\n") if "\n\n" not in fmt else ("\n\n",):
        s = _read(_lines(fmt, sep))
        assert s is not None and (s.chunks_in, s.unlabelled) == (4, 0) and s.id_scheme != "none", (fmt, sep, s)


@pytest.mark.parametrize("fmt", [
    '<document index="{n}"><source>handbook-{n}.pdf</source><document_content>{p}</document_content></document>',
    '<document index="{n}">\n<document_content>\n{p}\n</document_content>\n</document>',
    "<doc{n}>{p}</doc{n}>", "<source_{n}>{p}</source_{n}>", "<passage-{n}>{p}</passage-{n}>",
    '<doc id="{n}"><passage>{p}</passage></doc>', "<doc><title>{t}</title>{p}</doc>",
])
def test_xml_ish_tags_with_an_index_or_a_named_child_label_their_passages(fmt: str) -> None:
    s = shape(["<documents>\n" + _lines(fmt, "\n") + f"\n</documents>\n\n{QUESTION}"])
    assert s is not None and (s.chunks_in, s.id_scheme, s.delimiter, s.unlabelled) == (4, "source_id", "xml", 0)


def test_tags_without_an_index_stay_unlabelled() -> None:
    s = shape(["<documents>\n" + _lines("<document>{p}</document>", "\n") + f"\n</documents>\n\n{QUESTION}"])
    assert s is not None and (s.chunks_in, s.id_scheme, s.unlabelled) == (4, "none", 4)


@pytest.mark.parametrize("fmt", [
    "Step {n}: {p}", "Rule {n}: {p}", "{n}. {p}", "{n}) {p}", "Note {n}: {p}", "Instruction {n} — {p}", "- Step {n}: {p}",
    "Regel {n}: {p}", "Paso {n}: {p}",
])
@pytest.mark.parametrize("sep", ["\n", "\n\n"], ids=["lines", "paragraphs"])
def test_numbered_instruction_lists_are_not_passages(fmt: str, sep: str) -> None:
    for cue in ("Notes:", "Follow the instructions below.", "Knowledge base passages:"):
        assert _read(_lines(fmt, sep, INSTRUCTIONS), cue) is None, (fmt, cue)


SYSTEM_PROMPTS = [
    "You are a support assistant for a port operator.\n\nWhen you answer from the documents below, follow these "
    "steps:\n\nStep 1: Read the question carefully and find the passage that answers it.\n\nStep 2: Quote the "
    "passage's exact words where you can.\n\nStep 3: Name the passage you used at the end of your answer.",
    "Rules for using the context:\n1. Answer only from the retrieved passages and nothing else.\n2. Say you do not "
    "know when the passages are silent.\n3. Keep every answer shorter than one hundred words.",
    "Guidelines (read the notes below):\n- Always answer in the customer's own language.\n- Never promise delivery "
    "dates that are not in the notes.\n- Escalate to a human when the customer is angry or threatening.",
    "Notes:\nNote 1: Always greet the customer by their first name.\nNote 2: Never share another customer's booking "
    "details.\nNote 3: Offer the callback form when the queue is long.",
]


@pytest.mark.parametrize("text", SYSTEM_PROMPTS)
def test_a_system_prompt_of_instructions_holds_no_passages(text: str) -> None:
    # the first, third and fourth read as three unlabelled passages before 6e74101 (the second as three indexed)
    assert shape([text]) is None and shape([text + "\n\n" + QUESTION]) is None


@pytest.mark.parametrize("fmt", ["Step {n}: {p}", "{n}. {p}", "Note {n}: {p}", "- {p}"])
def test_pasted_passages_stay_unlabelled_next_to_a_numbered_instruction_list(fmt: str) -> None:
    s = _read("\n\n".join(FACTS) + "\n\nRules:\n" + _lines(fmt, "\n", INSTRUCTIONS))
    assert s is not None and (s.chunks_in, s.id_scheme, s.unlabelled) == (4, "none", 4)


@pytest.mark.parametrize("fmt", ["[{n}] {p}", "Note {n}: {p}", "FAQ {n}) {p}"])
def test_labelled_passages_stay_labelled_next_to_a_numbered_instruction_list(fmt: str) -> None:
    rules = "\n".join(f"Step {n + 1}: {p}" for n, p in enumerate(INSTRUCTIONS))
    s = _read(_lines(fmt, "\n\n") + "\n\nHow to answer:\n" + rules)
    assert s is not None and (s.chunks_in, s.unlabelled, s.delimiter) == (4, 0, "label")


def test_passages_in_blocks_under_an_instruction_word_stay_unlabelled() -> None:
    # several sentences each: passages, but "Step" names no source
    body = _lines("Step {n}: {p} It is posted at the gatehouse.", "\n\n")
    s = _read(body)
    assert s is not None and (s.chunks_in, s.id_scheme, s.unlabelled) == (4, "none", 4)


def test_a_word_and_an_index_on_one_passage_only_is_no_scheme() -> None:
    # "Wharf 9: ..." once among plain paragraphs is a fact about wharf 9, not a label scheme
    body = "\n\n".join(["Wharf 9: refrigerated containers only between six and ten on weekdays.", *FACTS[1:]])
    s = _read(body)
    assert s is not None and (s.id_scheme, s.unlabelled) == ("none", 4)


@pytest.mark.parametrize("fmt", ["Passage: {p}", "Document: {p}", "Source: {p}", "[Source] {p}", "Doc — {p}"])
def test_the_same_bare_word_on_every_passage_labels_none(fmt: str) -> None:
    s = _read(_lines(fmt, "\n\n"))
    assert s is not None and (s.chunks_in, s.id_scheme, s.unlabelled) == (4, "none", 4)


def test_repeated_titles_label_nothing() -> None:
    s = _read("\n\n".join(f"### Passage\n{p}" for p in FACTS))
    assert s is not None and (s.id_scheme, s.unlabelled) == ("none", 4)


def test_the_same_passage_under_two_index_labels_is_a_duplicate() -> None:
    s = _read("\n".join(f"Note {n}: {FACTS[0]}" for n in range(1, 4)))
    assert s is not None and (s.chunks_in, s.chunks_out, s.duplicates, s.unlabelled) == (3, 1, 2, 0)


@pytest.mark.parametrize("fmt", [
    "{p}", "- {p}", "> {p}", "**{p}**", "Today: {p}", "Important: {p}", "2024-03-0{n}: {p}", "Gate {n} closes. {p}",
    "{p} See also the handbook.", "In 202{n} {p}",
])
def test_plain_pasted_passages_stay_unlabelled(fmt: str) -> None:
    for sep in ("\n", "\n\n"):
        s = _read(_lines(fmt, sep))
        assert s is not None and (s.chunks_in, s.id_scheme, s.delimiter, s.unlabelled) == (4, "none", "none", 4)


@pytest.mark.parametrize("fmt", ["[{n}] {p}", "Note {n}:\n\n{p}", "FAQ {n}) {p}"])
def test_a_line_introducing_or_closing_labelled_passages_is_no_passage(fmt: str) -> None:
    intro = "Here are the passages our search found for this question, most relevant first."
    outro = "Answer using the passages above and cite each one you use by its number."
    s = _read("\n\n".join([intro, _lines(fmt, "\n\n"), outro]))
    assert s is not None and (s.chunks_in, s.unlabelled, s.delimiter) == (4, 0, "label")


def test_the_same_lines_around_plain_passages_leave_them_unlabelled() -> None:
    intro = "Here are the passages our search found for this question, most relevant first."
    s = _read("\n\n".join([intro, *FACTS]))
    assert s is not None and (s.id_scheme, s.delimiter) == ("none", "none") and s.unlabelled >= 4
