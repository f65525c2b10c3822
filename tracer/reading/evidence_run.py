"""Retrieved passages found by their shape when no line names them (evidence_shape.py reads what is found).

An app may paste retrieved passages under any heading ("From the help centre:", "Clinic leaflets:", "Aus dem
Handbuch:") or none at all (its instructions, then the passages, a blank line apart). Such a run is told from
instructions written as prose by what its paragraphs are, not by a word list:

* under a heading (a line ending in a colon that names no rules, examples, style or persona) that names the
  material, or after instructions that do ("From the help centre:"; not "Plans:" or "Today's specials:",
  reference an app writes into its own prompt): two or more paragraphs of statements (few imperative
  sentences, none in the first person), nothing but a question or a closing one-line instruction after them;
* with no heading: three or more such paragraphs at the end of a text whose opening paragraph instructs
  (an imperative or "You ...") and speaks of the material ("from the FAQ", "the notes", "the passages
  below"), each a self-contained statement (not opening with "It", "They", "However"...), none an
  imperative or in the first or second person, of like length (the longest at most four times the shortest).

Rules, personas, style guides, few-shot examples, a company's self-description and a policy written as
prose fail one of these: they instruct, address the model, speak as "we", continue one another, or are
followed by more instructions. Labels are then read as for any passages (a label heading a paragraph is
stripped before its text is judged).
"""

from __future__ import annotations

import re
from collections.abc import Callable

MIN_CHARS = 40  # shorter paragraphs are headings, questions or instructions, not retrieved passages

_SPLIT = re.compile(r"\n[ \t]*\n|^[ \t]*(?:-{3,}|\*{3,}|={3,}|_{3,}|```[^\n]*|~~~[^\n]*)[ \t]*$",
                    re.MULTILINE)
_QUESTION = re.compile(r"^[ \t]*(?:question|query|q|task|user|instructions?|answer)[ \t]*:", re.IGNORECASE)
# an instruction's first words: an imperative verb, "always"/"never", or the reader addressed
_IMPERATIVE = re.compile(
    r"^(?:\W{0,3})(?:always|never|do|don'?t|please|only|be|make|use|answer|respond|reply|write|keep|avoid|ask|check|"
    r"confirm|greet|include|ensure|cite|follow|provide|return|give|tell|say|list|explain|summari[sz]e|refuse|"
    r"decline|escalate|verify|mention|state|format|start|begin|end|stop|try|let|add|remove|call|send|offer|"
    r"apologi[sz]e|thank|output|produce|quote|translate|assume|consider|prefer|limit|treat|stay|remain|read|"
    r"look|find|search|pick|choose|select|note that|remember|report|flag|mark|skip|ignore|focus|prioriti[sz]e|"
    r"identify|determine|compare|describe|suggest|recommend|collect|gather|open|close|click|enter|type|run|"
    r"install|wait|go|move|show|display|print|set|create|update|delete|save|submit|review|analy[sz]e|classify|"
    r"extract|rewrite|refer|direct|route|handle|reject|accept|allow|request|notify|inform|address|"
    r"you(?:'ll| must| should| will| are| may| can| need)|if the user|when the user)\b(?!-)", re.IGNORECASE)
# A verb that is also a noun can open a statement: "Return tickets bought in April include a free crossing",
# "Open days are held in May". After such a word, an object follows an imperative ("Return the form",
# "Check your balance is right") and a clause of its own does not: a statement's verb comes before any
# subordinate clause ("Keep answers short when the user is in a hurry" instructs).
_OBJECT_OPENER = frozenset(
    "the a an your our their my his her its this that these those all any each every some no it them me us him "
    "her up out back down in on off to for with from by at if when whether what which how who where why sure "
    "only always never not just so as than also again".split())
_FINITE = frozenset(
    "is are was were has have had will can may must include includes apply applies cost costs run runs close "
    "closes open opens start starts end ends take takes need needs remain remains leave leaves arrive arrives "
    "vary varies last lasts come comes depend depends stay stays get gets go goes sit sits".split())
_CLAUSE_BREAK = frozenset(
    "that which who whom whose if when whenever while whether unless because so and or but once where".split())


def imperative_opening(sentence: str) -> bool:
    """True when ``sentence`` opens as an instruction: an imperative verb, "always"/"never" or the reader
    addressed (_IMPERATIVE), and not a statement whose first word is a noun that is also a verb."""
    text = sentence.strip()
    m = _IMPERATIVE.match(text)
    if m is None:
        return False
    if " " in m.group(0).strip():
        return True  # "you must", "note that", "if the user": no noun reading
    words = re.findall(r"[\w'-]+|[,;:()\u2014\u2013]", text[m.end():])
    if not words or words[0].lower() in _OBJECT_OPENER or not words[0][0].isalpha():
        return True
    for w in words[1:]:
        low = w.lower()
        if low in _FINITE:
            return False  # "Return tickets bought in April include ...": the noun phrase's own verb
        if low in _CLAUSE_BREAK or not w[0].isalnum():
            return True
    return True

_SENTENCE_END = re.compile(r"[.!?。！？](?:\s|$)")
_SENTENCE = re.compile(r"[^.!?。！？]+(?:[.!?。！？]+|$)")
# a line ending in a colon, alone: a heading over what follows
_HEAD = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?P<head>[^\n:：]{2,80}?)(?:\*\*|__)?[ \t]*[:：](?:\*\*|__)?[ \t]*$",
                   re.MULTILINE)
# headings over instructions, examples or the assistant itself, not over material
_NOT_MATERIAL = re.compile(
    r"\b(?:rules?|instructions?|guidelines?|guidance|examples?|samples?|steps?|style|tone|voice|format(?:ting)?|"
    r"persona|role|character|constraints?|outputs?|responses?|tasks?|polic(?:y|ies)|dos|don'?ts|requirements?|"
    r"goals?|objectives?|about|background on|overview|profile|bio|conversation|dialogue|transcript|history|"
    r"user|assistant|customer|agent|input|notes? for|remember|important|warnings?|tips?|do not|never|always|"
    r"background|situation|scenario|setting|premise|plot|world|characters?|setup|description|"
    r"company|business|brand|text|e-?mail|letter|essay|story|poem|draft|message|code|summary|translation|"
    # the same in other languages
    r"regeln?|anweisungen?|richtlinien?|beispiele?|aufgaben?|stil|rolle|règles?|consignes?|exemples?|"
    r"reglas?|instrucciones|ejemplos?|tareas?|regole|istruzioni|esempi|regras?|instruções|exemplos?|"
    r"правила|инструкции|примеры|задачи)\b|规则|指令|指示|示例|例子|要求|ルール|例",
    re.IGNORECASE)
# a deontic sentence: what may, must or cannot be done (a policy's, not a passage's, voice when most are)
# ("cannot be returned", "may only be used"; not "patients who cannot drive")
_MODAL = re.compile(r"\b(?:must|shall|should|may|(?:can|cannot|can't)(?: not| only)? be|is required|are required|"
                    r"not allowed|prohibited|not permitted|entitled)\b", re.IGNORECASE)
# the assistant told what it does in the third person ("The assistant answers in English.")
_ASSISTANT = re.compile(r"^\W{0,3}(?:the )?(?:assistant|model|bot|chatbot|agent|ai|llm)\b", re.IGNORECASE)
# a paragraph that goes on from the one before ("It ...", "However, ...") or speaks as "we"/"you"
_CONTINUES = re.compile(
    r"^\W{0,3}(?:it|its|this|that|these|those|they|their|them|he|she|his|her|him|we|our|us|i|my|you|your|however|"
    r"but|and|or|also|so|then|moreover|furthermore|additionally|in addition|finally|next|meanwhile|otherwise|"
    r"for example|for instance|because|therefore|thus|later|afterwards|there)\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:we|we're|we've|our|ours|us|i|i'm|my|me)\b", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|you're|you'll)\b", re.IGNORECASE)
_DIALOGUE = re.compile(r"^[ \t]*(?:user|assistant|human|ai|bot|customer|agent|client|q|a|input|output|example)"
                       r"[ \t]*\d{0,3}[ \t]*:", re.IGNORECASE | re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t]+")
# an instruction that speaks of the material it is given ("answer from the FAQ", "use the notes below")
_MATERIAL_WORDS = (
    r"context|documents?|passages?|sources?|excerpts?|snippets?|search results?|retrieved|knowledge(?: base)?|"
    r"references?|articles?|notes|records|chunks?|results|information|materials?|extracts?|quotes?|pages?|docs|"
    r"faqs?|kb|evidence|entries|help ?cent(?:re|er)|handbook|manuals?|guides?|leaflets?|brochures?|wiki|"
    r"catalog(?:ue)?s?|search|found|matches|hits|help ?desk|"
    # the same in other languages
    r"handbuch|hilfe|dokumente?|quellen?|ayuda|documentos?|fuentes?|extraits?|aide|fiches?|sources|"
    r"документы?|источники")
_MATERIAL = re.compile(rf"\b(?:{_MATERIAL_WORDS})\b|帮助|资料|文档|文件|検索|資料|ヘルプ", re.IGNORECASE)
# what names a style guide, rules or a story's world, not material to answer from ("the style notes below")
_NOT_SOURCE = re.compile(r"\b(?:style|tone|voice|format|persona|character|world|story|stories|rules?|guidelines?|"
                         r"polic(?:y|ies)|examples?)\b", re.IGNORECASE)

# the material as where answers come from ("from the help centre", "using the notes", "based on the FAQ")
_FROM_MATERIAL = re.compile(r"\b(?:from|using|use|based on|according to|grounded in|rely on|relying on|cite|citing)"
                            rf"\s+(?:[\w'’-]+\s+){{0,4}}(?:{_MATERIAL_WORDS})\b", re.IGNORECASE)
Opening = Callable[[str], "tuple[str, str, str] | None"]
_MAX_HEADS = 16  # headings tried, from the last
_MAX_RUN = 40  # paragraphs a run without a heading may hold


def _names_material(text: str) -> bool:
    """Whether ``text`` speaks of retrieved material ("From the help centre", "answer from the notes"), not of
    a style guide's or a story's ("the style notes")."""
    return _MATERIAL.search(text) is not None and _NOT_SOURCE.search(text) is None


def _imperative(sentence: str) -> bool:
    return imperative_opening(sentence) or _ASSISTANT.match(sentence.strip()) is not None


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text.replace("\n", " ")) if len(s.strip()) > 2]


def _units(block: str) -> list[str]:
    return [u.strip() for u in _SPLIT.split(block) if u and u.strip()]


def _after(units: list[str]) -> list[str]:
    """The units without what closes them: a question or a one-line instruction (two at most)."""
    out = list(units)
    for _ in range(2):
        if not out:
            break
        last = out[-1]
        if "\n" not in last and len(last) <= 300 and (last.endswith(("?", "？")) or _QUESTION.match(last)
                                                       or _imperative(last)):
            out.pop()
    return out


def _statements(units: list[str], opening: Opening, *, strict: bool) -> list[str] | None:
    """The passages of a run of paragraphs that state things (one paragraph, or one line when a paragraph
    holds lines of a passage each), or None when the run instructs, speaks as "we", holds a list of short
    items or a dialogue, or (``strict``) addresses the reader, goes on from the one before or varies in
    length."""
    if len(units) == 1 and "\n" in units[0]:
        units = [x.strip() for x in units[0].splitlines() if x.strip()]
    if sum(1 for u in units if _LIST_ITEM.match(u)) > len(units) / 2:
        return None  # a bulleted or numbered list of records ("- The Salt Road (ISBN ...): ..."), not pasted prose
    bodies: list[str] = []
    pending = False  # a label alone on its paragraph heads the next
    for u in units:
        if _DIALOGUE.search(u):
            return None
        o = opening(u)
        body = o[1].strip() if o is not None and o[2] != "instruction" else u
        if len(body) < MIN_CHARS:
            if o is None or body or pending:
                return None  # a short line among the passages: a sub-heading or an instruction
            pending = True
            continue
        pending = False
        if body.endswith((":", "：")):
            return None  # a heading over what follows, not a passage
        lines = [x for x in body.splitlines() if x.strip()]
        if len(lines) >= 2 and sum(1 for x in lines if _LIST_ITEM.match(x)) > len(lines) / 2:
            return None  # a list, not a paragraph of prose
        sentences = _sentences(body)
        if not sentences or sum(1 for s in sentences if _imperative(s)) > (0 if strict else len(sentences) / 2):
            return None
        if _FIRST_PERSON.search(body):
            return None
        if (strict and _SECOND_PERSON.search(body)) or (bodies and _CONTINUES.match(body)):
            return None
        bodies.append(body)
    if pending or len(bodies) < (3 if strict else 2):
        return None
    sentences = [s for b in bodies for s in _sentences(b)]
    if sum(1 for s in sentences if _MODAL.search(s)) > len(sentences) / (3 if strict else 2):
        return None  # a policy written as prose
    lengths = [len(b) for b in bodies]
    if strict and max(lengths) > 4 * min(lengths):
        return None
    return bodies


def answers_from_material(instructions: str) -> bool:
    """Whether ``instructions`` (a system prompt) tell the model to answer from material."""
    return any(_answers_from(s) for s in _sentences(instructions))


def after_question(text: str, opening: Opening) -> str | None:
    """The passages a question is followed by in its own message, no line naming them (for a prompt whose
    system prompt ``answers_from_material``): three or more statements as strict as those ending a text after
    its instructions (``run``)."""
    if text.count("\n") < 6:
        return None  # no room for a question and three passages, each a blank or rule line apart
    units = _after(_units(text))
    if len(units) < 4 or "\n" in units[0] or len(units[0]) > 300:
        return None
    ask = units[0].rstrip()  # a question, the user's own words ("I left my gloves...") or a request
    if not (ask.endswith(("?", "？")) or _FIRST_PERSON.search(ask) or _imperative(ask)):
        return None
    if _statements(units[1:], opening, strict=True) is None:
        return None
    return text[text.find(units[1]):text.rfind(units[-1]) + len(units[-1])]  # with the rules between them


def _answers_from(sentence: str) -> bool:
    """An instruction to answer from material ("You answer guests from the help centre", "Use the notes").
    (Naming it is not enough: "You give feedback on the documents" works on the user's own text.)"""
    return (_imperative(sentence) or sentence.lower().startswith("you ")) and _names_material(sentence) and \
        _FROM_MATERIAL.search(sentence) is not None


def run(text: str, opening: Opening) -> str | None:
    """The block of passages a text pastes without a cue word, or None: the paragraphs under the last
    heading line over two or more statements, or the three or more statements that end a text after its
    instructions (module docstring). ``opening`` reads a paragraph's label (evidence_shape._opening)."""
    heads = list(_HEAD.finditer(text))
    for m in reversed(heads[-_MAX_HEADS:]):
        head = m.group("head")
        if (_NOT_MATERIAL.search(head) or _QUESTION.match(m.group(0)) or _imperative(head)
                or _FIRST_PERSON.search(head) or _SECOND_PERSON.search(head)
                or (o := opening(m.group(0).strip())) is not None and o[2] != "title"):
            continue
        if not (_names_material(head) or any(_names_material(x) for x in _sentences(text[:m.start()]))):
            continue  # "Plans:", "Today's specials:": reference the app wrote, not material it retrieved
        units = _after(_units(text[m.end():]))
        if units and _statements(units, opening, strict=False) is not None:
            return "\n\n".join(units)
    units = _after(_units(text))
    first = _sentences(units[0]) if units else []
    if len(units) < 4 or not any(_imperative(s) or s.lower().startswith("you ") for s in first):
        return None  # no instructions open the text
    named = False  # the instructions so far speak of the material they are given
    for k in range(1, len(units) - 2):  # the instructions are units[:k], the passages the rest
        named = named or any(_names_material(x) for x in _sentences(units[k - 1]))
        if k < len(units) - _MAX_RUN or not named or units[k - 1].endswith((":", "：")):
            continue
        if _statements(units[k:], opening, strict=True) is not None:
            return "\n\n".join(units[k:])
    return None
