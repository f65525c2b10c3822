"""Retrieved chunks as a prompt shows them: how many, labelled or not, delimited or not.

The one rule for every place that sees a prompt's text: the client middleware (``adapters/middleware/client_stages.py``)
and the collector, for other instrumentations' spans. It needs nothing but the registry's names, so the collector may use it (tracer imports no adapter).

A RAG app that pastes retrieved passages into the prompt without ``format_evidence`` still shows their
structure on the wire: a block introduced by a cue ("Context:", "Use the passages below", a ``<documents>``
tag) followed by several passages, or, when no line names them, found by their own shape: statements
under any heading, or ending a text after its instructions (evidence_run.py). Only the *shape* is
recorded (counts and scheme names), never the text, so this runs under every capture mode but ``none``;
with it a keyed hash of the set of distinct passages and where the block sat (system prompt, user message,
history), so the analyzer can tell the app's own fixed reference text from passages retrieved per question.

The rules are general, not tuned to one phrasing: a passage is a paragraph (blank-line, rule or tag
separated) of at least ``MIN_CHARS`` characters; a passage is labelled when it opens with an id of its own
(``[3]``, ``[kb-12]``, ``Doc 2:``, ``Source: x.pdf``, ``id=...``) or carries one in its tag; the block is
delimited when its passages are wrapped in tags, headed by markdown headings, fenced, or separated by rule
lines (a blank line alone does not tell the model where one source ends), or sent as JSON objects (an
array, an object holding one, or one a line), each labelled by an id-like key (``id``, ``doc_id``, ``url``).

A word and an index ("Note 3:", "Entry 2 —", "FAQ 12)", "Quelle 2:") labels a passage unless it numbers
instructions: a word that names a step or a rule ("Step 2:", "Rule 4:") is no source, and an item whose text is
one imperative line ("Note 1: Always answer in English.") is an instruction, not a passage (so is a bulleted
list of such lines); any other word is a
label when it opens at least two passages. A title (a markdown heading or a bold line of its own, distinct per
passage), a source given at the end ("... (source: x.pdf)"), a numbered tag name (``<doc1>``) or an
``index=`` attribute label a passage too; a label alone on its line or paragraph labels the passage after it.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from llmtrace.tracer.reading.digest_cache import DigestCache, digest
from llmtrace.tracer.reading.evidence_json import inline_documents, json_documents
from llmtrace.tracer.reading.evidence_run import (
    _QUESTION,
    _SENTENCE_END,
    _SPLIT,
    MIN_CHARS,
    after_question,
    answers_from_material,
    imperative_opening,
    run,
)
from llmtrace.tracer.reading.memory import memory
from llmtrace.tracer.record import capture
from llmtrace.tracer.registry import names as N

# A line that announces retrieved material ("Context:", "Here are the search results:", "## Sources").
_WORDS = (r"context|documents?|passages?|sources?|excerpts?|snippets?|search results?|retrieved|knowledge(?: base)?|"
          r"references?|articles?|notes|records|chunks?|results|information|materials?|extracts?|quotes?|"
          r"quotations?|pages?|docs|faqs?|kb|evidence|entries|help[ -]?cent(?:re|er)|handbook|manual|wiki")
# A line that announces retrieved material: a heading or a line ending in a colon that names it ("Context:",
# "## Sources", "Search results:"), or a sentence pointing at it ("Answer from the passages below.").
_CUE = re.compile(
    rf"^[ \t]*(?:#{{1,6}}[ \t]*[^\n]{{0,60}}?\b(?:{_WORDS})\b[^\n]{{0,60}}"
    rf"|[^\n]{{0,100}}?\b(?:{_WORDS})\b[^\n]{{0,60}}?(?::|\.{{3}}|…)"
    rf"|[^\n]{{0,100}}?\b(?:{_WORDS})\b[ \t]+(?:below|that follow|following)\b[^\n]{{0,80}}"
    rf"|[^\n]{{0,100}}?\b(?:the following|these|below)[ \t]+(?:\w+[ \t]+)?(?:{_WORDS})\b[^\n]{{0,80}})[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_MATERIAL_WORD = re.compile(rf"\b(?:{_WORDS})\b", re.IGNORECASE)
_OPEN_TAG = re.compile(r"<(doc|document|source|passage|chunk|context|snippet|result|article|item)\b([^>]*)>",
                       re.IGNORECASE)
# Any other tag: it wraps a passage only when it carries an id of its own and repeats (``<note id="tax-0">``,
# ``<record key="r1">``): whatever an app calls its passages, the model sees an id on each.
_ANY_TAG = re.compile(r"<([A-Za-z][\w.:-]{0,40})\b([^<>]*)>")
# tag names that are markup or a prompt's own layout, never a wrapper of retrieved passages
_NOT_PASSAGE_TAGS = frozenset(
    "a b i u s p br hr em strong code pre span div li ul ol table tr td th thead tbody img sup sub small font "
    "h1 h2 h3 h4 h5 h6 blockquote details summary example examples instructions instruction rules rule "
    "question questions answer answers input output query user assistant system human ai thinking reasoning "
    "format response task tool tool_call tool_result function_call function_results".split())
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+\S", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*(?:```|~~~)", re.MULTILINE)
_RULE = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|={3,}|_{3,})[ \t]*$", re.MULTILINE)
# An id-like token: letters and digits joined by a dash or underscore, or mixing letters with digits
# ("tax-0", "kb_12", "A7"), or three dash-joined parts ("refund-policy-uk"); "follow-up" and "Step 1" are not.
_IDTOK = (r"(?=[\w-]*[A-Za-z])(?=[\w-]*[\d_]|[A-Za-z0-9]+(?:-[A-Za-z0-9]+){2})"
          r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
# A label a passage opens with: [3], [kb-12], (2), 3., Doc 2:, Source: x.pdf, id=abc, #4, "Passage B —"
_LABEL = re.compile(
    # an optional bullet before the label ("- [0] ...", "* Doc 2: ..."), then the label; "[ ]"/"[x]" are
    # checklist boxes, not ids
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:[-*+•][ \t]+)?(?:\[(?![ xX]?\])[^\]\n]{1,48}\]|\(\d{1,3}\)|\d{1,3}[.)][ \t]|"
    r"#\d{1,4}\b|"
    # "tax-0: ...", "Note tax-0: ...", "Ticket KB12: ...": an id-like token (after at most one short word)
    # and a colon at the passage's start
    rf"(?:[A-Za-z]{{1,12}}[ \t]+)?(?:{_IDTOK}):(?=[ \t]|$)|"
    r"(?:doc(?:ument)?|source|src|id|chunk|passage|snippet|ref(?:erence)?|result|article|excerpt|record|file|"
    r"url)[ \t]*(?:#|no\.?)?[ \t]*[:=#]?[ \t]*[\w./:-]{1,64}[ \t]*(?:[:\]\-—|)]|\n|$)|"
    # "Source 2 (handbook.pdf):", "Document B — refunds:", "Title: ...", "【3】"
    r"(?:doc(?:ument)?|source|passage|snippet|excerpt|article|chunk|result|title)\b[^\n:]{0,60}:|【[^】\n]{1,40}】|"
    # a file or a web address the passage comes from: "handbook.pdf: ...", "From refunds.md (p. 3): ..."
    r"(?:(?:from|in|see)[ \t]+)?(?:[\w-]+\.(?:pdf|docx?|md|txt|html?|csv|json|pptx?|xlsx?|rst)|https?://[^\s:]{3,200})"
    r"\b[^\n:]{0,40}:(?=[ \t]|$))",
    re.IGNORECASE,
)
# id=, key=, source=, ... and their prefixed forms (doc_id=, data-key=)
_ID_ATTR = re.compile(r"(?<![\w-])(?:[\w-]*[_-])?(?:id|key|source|src|name|title|ref|url|index|idx|num|number)\s*=",
                      re.IGNORECASE)
# a tag whose name carries its index (<doc1>, <source_2>, <passage-3>)
_NUMBERED_TAG = re.compile(r"<([A-Za-z][A-Za-z_]{0,30}?)[-_]?(\d{1,4})\b([^<>]*)>")
# a child tag that names its passage (<source>x.pdf</source>, <title>...</title>)
_CHILD_LABEL = re.compile(r"<(?:source|src|title|url|uri|id|doc_id|filename|file|name|ref)>[ \t]*[^<\s]", re.IGNORECASE)
_WS = re.compile(r"\s+")
_BULLET = re.compile(r"^[-*+•][ \t]+")
_TAG = re.compile(r"</?[A-Za-z][\w-]*[^>]*>")

# A word and an index at a passage's start: "Note 3:", "Entry 2 —", "FAQ 12)", "Item #4:", "Quelle 2:", "文档1：".
# Whether it labels a passage or numbers an instruction is decided by the word and the text after it
# (_read_labels).
_WORD_INDEX = re.compile(
    # "Search result 3", "Knowledge base article 12": the last word names the item
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:[-*+•][ \t]+)?(?:\*\*|__)?(?P<pre>(?:[^\W\d_]{2,20}(?![^\W\d_])[ \t]+){0,2}?)(?P<word>[^\W\d_]{2,20})"
    r"(?![^\W\d_])\.?[ \t]*(?:#|[Nn][or]\.|[Nn]°|№)?[ \t]*"
    r"(?P<index>\d{1,4}(?:\.\d{1,3})*|(?<=[\s#.°№])(?:[A-Z]|[IVXLC]{1,6}))(?![\w.]\w)"
    r"(?:[ \t]*(?:of|/)[ \t]*\d{1,4})?"  # "Document 3 of 5"
    r"(?:[ \t]*(?:\([^)\n]{1,80}\)|\[[^\]\n]{1,80}\]))?[ \t]*(?:\*\*|__)?[ \t]*"
    r"(?:[:.)\]|：）]|[-–—]{1,2}(?=\s|$)|(?=\n)|$)(?:[ \t]*(?:\*\*|__))?[ \t]*")
# words that name a retrieved passage, in several languages
_SOURCE_WORDS = frozenset("""
source sources src doc docs document passage snippet excerpt extract article chunk result hit record file entry faq
note item card fact memo page section citation reference ref evidence kb clip fragment quote quotation review ticket
report paper study link chapter paragraph para clause part context
quelle dokument abschnitt auszug eintrag notiz artikel ergebnis treffer textstelle absatz
extrait entrée résultat fiche
fuente documento pasaje extracto artículo nota entrada resultado fragmento
fonte passaggio estratto articolo voce risultato trecho artigo
bron notitie resultaat
источник документ отрывок фрагмент статья заметка запись результат
文档 文件 来源 资料 段落 片段 参考 文書 出典 資料 抜粋 記事 문서 출처 자료
""".split())
# words that number instructions, not sources
_INSTRUCTION_WORDS = frozenset("""
step steps rule rules instruction instructions task tasks phase stage requirement guideline constraint principle
directive tip hint warning caution todo action objective goal criterion question answer query
schritt regel anweisung aufgabe étape etape règle regle consigne tâche tache paso regla instrucción instruccion
tarea passo regola istruzione compito regra instrução instrucao tarefa etapa stap opdracht
шаг правило инструкция задача этап 步骤 规则 指令 任务 手順 ルール 指示
""".split())
# a sentence that speaks of the passages ("Here are the notes we found.", "the sources above")
_ABOUT = re.compile(rf"\b(?:{_WORDS}|above|below|following)\b", re.IGNORECASE)
# a source named at the passage's end: "(source: handbook.pdf)", "[from: kb-12]", a last line "Source: x.pdf"
_TRAILING_SOURCE = re.compile(
    r"(?:[(\[][ \t]*(?:source|src|from|via|ref|reference|doc|document|file|url|quelle|fuente|fonte|bron|источник)"
    r"[ \t]*[:=][^)\]\n]{1,120}[)\]]|[(\[<]https?://[^)\]>\s]{3,200}[)\]>]|\n[ \t]*(?:[-—–][ \t]*)?(?:source|src|from|reference|quelle|fuente|fonte|bron|"
    r"источник)[ \t]*[:=][ \t]*\S[^\n]{0,120})[ \t]*[.]?[ \t]*$", re.IGNORECASE)
# a short header line naming the passage under it ("Title: Gate hours", "Source: handbook.pdf, p. 3")
_HEADER = re.compile(r"^[ \t]*(?:title|source|url|uri|link|file|doc(?:ument)?|id)[ \t]*:", re.IGNORECASE)
# a title line of its own: a markdown heading or a line in bold
_TITLE = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+(?P<h>[^\n]{1,100})|(?:\*\*|__)(?P<b>[^*_\n]{1,100})(?:\*\*|__)[ \t:]*)(?=\n|$)")


@dataclass(frozen=True, slots=True)
class EvidenceShape:
    chunks_in: int  # passages found, duplicates included
    chunks_out: int  # distinct passages
    duplicates: int
    id_scheme: str  # none, index, source_id
    delimiter: str  # none, xml, markdown, fenced, rule, label
    unlabelled: int  # distinct passages without a label of their own
    # the distinct passages' in-memory keys, sorted (so the set, not the order): values() stores only a keyed
    # hash of them, which tells the app's own fixed reference text (the same every call) from retrieved passages
    passage_keys: tuple[str, ...] = ()


def _key(text: str) -> str:
    return hashlib.blake2b(_WS.sub(" ", text).strip().casefold().encode(), digest_size=8).hexdigest()


def _wrappers(block: str) -> list[tuple[re.Match[str], bool]]:
    """The open tags that may wrap a passage, each with whether its name carries an index: the known names,
    any other name that repeats with an id, and names numbered in turn (``<doc1>``, ``<doc2>``)."""
    known = [(m, False) for m in _OPEN_TAG.finditer(block)]
    # Other tag names, each with its open tags and whether they carry an id. A name that repeats with an id
    # wraps named passages; the same tag with no id around each of several passages (``<note>...</note>``) is
    # an app's own name for them, unnamed; markup and the parts of a prompt's own layout are neither.
    others: dict[str, list[tuple[re.Match[str], bool]]] = {}
    for m in _ANY_TAG.finditer(block):
        if not _OPEN_TAG.fullmatch(m.group(0)):
            others.setdefault(m.group(1).casefold(), []).append((m, bool(_ID_ATTR.search(m.group(2)))))
    for tag, found in others.items():
        with_id = [m for m, has_id in found if has_id]
        wrapping = with_id if with_id else [] if tag in _NOT_PASSAGE_TAGS else \
            [m for m, _ in found if not m.group(0).endswith("/>")]
        if len(wrapping) >= 2:
            known += [(m, False) for m in wrapping]
    numbered: dict[str, list[re.Match[str]]] = {}
    for m in _NUMBERED_TAG.finditer(block):
        numbered.setdefault(m.group(1).casefold(), []).append(m)
    indexed = {m.start() for ms in numbered.values() if len({x.group(2) for x in ms}) >= 2 for m in ms}
    taken = {m.start() for m, _ in known}
    known = [(m, m.start() in indexed) for m, _ in known]
    known += [(m, True) for ms in numbered.values() for m in ms if m.start() in indexed and m.start() not in taken]
    return sorted(known, key=lambda x: x[0].start())


def _tagged(block: str) -> list[tuple[str, bool]] | None:
    """Passages wrapped in tags, each with whether it is named (by its tag, a child ``<source>``/``<title>``
    or a label it opens with); None when the block has fewer than two. A tag holding two or more passages is
    their container; a tag holding one (``<document index="1"><document_content>...``) is that passage."""
    spans: list[tuple[int, int, str, bool]] = []
    for m, numbered in _wrappers(block):
        name = m.group(0)[1:].split(None, 1)[0].rstrip(">/")
        close = re.search(rf"</{re.escape(name)}\s*>", block[m.end():], re.IGNORECASE)
        if close is None:
            continue
        end = m.end() + close.start()
        body = block[m.end(): end].strip()
        if len(_TAG.sub("", body).strip()) < MIN_CHARS:
            continue
        opened = _opening(_TAG.sub("", body).strip())
        named = (numbered or bool(_ID_ATTR.search(m.group(0))) or bool(_CHILD_LABEL.search(body))
                 or (opened is not None and opened[2] in ("id", "source", "title", "trail")))
        spans.append((m.start(), end, body, named))
    starts = [t[0] for t in spans]  # in order: the passages inside spans[i] are the next inner[i]
    inner = [bisect_left(starts, end) - bisect_right(starts, start) for start, end, _, _ in spans]
    out: list[tuple[str, bool]] = []
    around: list[int] = []  # the wrappers enclosing this one
    for i, (start, _, body, named) in enumerate(spans):
        while around and spans[around[-1]][1] <= start:
            around.pop()
        alone_inside = any(inner[j] < 2 for j in around)
        around.append(i)
        if inner[i] >= 2 or alone_inside:
            continue  # a container of tagged passages, or the one passage inside a wrapper (read as that wrapper)
        out.append((body, named or any(spans[j][3] for j in range(i + 1, i + 1 + inner[i]))))
    return out if len(out) >= 2 else None


def _paragraphs(block: str) -> list[str]:
    """The block's paragraphs that may be passages. A label alone on its paragraph ("Note 3:", "## Refunds",
    "Source: x.pdf") is joined to the passage after it, or to the one before it when the labels follow
    their passages (the block opens with a passage and ends with a label)."""
    units: list[tuple[str, bool]] = []  # (text, a label alone)
    for p in _SPLIT.split(block):
        p = p.strip()
        if not p or _QUESTION.match(p) or (p.endswith("?") and "\n" not in p and len(p) < 200):
            units.append(("", False))
            continue  # the question or an instruction after the passages
        if len(_TAG.sub("", p).strip()) >= MIN_CHARS:
            units.append((p, False))
            continue
        opened = _opening(p) if "\n" not in p else None
        alone = opened is not None and (not opened[1].strip() or _HEADER.match(p) is not None)
        units.append((p, True) if alone else ("", False))
    kinds = [label for p, label in units if p]
    trailing = bool(kinds) and not kinds[0] and kinds[-1]  # a passage first and a label last
    paras: list[str] = []
    pending: str | None = None
    for k, (p, label) in enumerate(units):
        if label and trailing and k and units[k - 1][0] and not units[k - 1][1] and paras:
            paras[-1] = f"{paras[-1]}\n{p}"
        elif label:
            pending = None if trailing else p
        elif p:
            paras.append(f"{pending}\n{p}" if pending else p)
            pending = None
        else:
            pending = None
    return paras


def _scheme(labels: Sequence[str | None]) -> str:
    given = [x for x in labels if x]
    if not given or len(given) < len(labels) / 2:
        return "none"
    return "index" if all(re.fullmatch(r"[\[(#]?\d{1,4}[\])\].:]?", x.strip()) for x in given) else "source_id"


def _opening(p: str) -> tuple[str, str, str] | None:
    """The label a passage opens (or, for a source, ends) with, the text without it, and its kind: ``id``
    (an id or a source word the id rule knows), ``number`` (a bare "3." or "(3)"), ``source`` or
    ``instruction`` (a word and an index, by the word), ``word:<w>`` (any other word and an index),
    ``title`` (a heading or a bold line) or ``trail`` (a source named at the end)."""
    m = _LABEL.match(p)
    if m is not None:
        label = _BULLET.sub("", m.group(0).strip().lstrip("#").strip()).rstrip(":—-|").strip()
        kind = "number" if re.fullmatch(r"\(?\d{1,3}[.)]?", label) else "id"
        return label, p[m.end():], kind
    w = _WORD_INDEX.match(p)
    word = w.group("word").casefold() if w is not None else ""
    if w is not None and (not w.group("pre") or word in _SOURCE_WORDS):  # "Yard rule 1" is a title, not a rule
        kind = "source" if word in _SOURCE_WORDS else "instruction" if word in _INSTRUCTION_WORDS else f"word:{word}"
        return f"{w.group('pre')}{w.group('word')} {w.group('index')}", p[w.end():], kind
    t = _TITLE.match(p)
    if t is not None:
        return (t.group("h") or t.group("b") or "").strip(" :"), p[t.end():], "title"
    end = max(0, len(p) - 240)  # a source named at the end: read only the end, and only if it may hold one
    s = _TRAILING_SOURCE.search(p, end) if any(c in p[end:] for c in "([<\n") else None
    if s is not None:
        return s.group(0).strip(" \n.()[]"), p[:s.start()], "trail"
    return None


def _instruction(body: str) -> bool:
    """One imperative line ("Always answer in English.", "Cite the passage id."): an instruction, not a passage."""
    text = _TAG.sub("", body).strip()
    return ("\n" not in text and len(text) <= 200 and len(_SENTENCE_END.findall(text)) <= 2
            and imperative_opening(text))


def _instruction_block(p: str) -> bool:
    """Two or more numbered or bulleted lines, most of them one imperative line, perhaps under a line such
    as "Rules:": an instruction list, not a passage."""
    if len(p) > 4000:  # an instruction list is short; a long paragraph is read as text
        return False
    lines = [x.strip() for x in p.splitlines() if x.strip()]
    if lines and lines[0].endswith(":") and len(lines[0]) <= 80 and _opening(lines[0]) is None:
        lines = lines[1:]
    if len(lines) < 2:
        return False
    bodies: list[str] = []
    for x in lines:
        o = _opening(x)
        if o is not None and _numbered(o[2]):
            bodies.append(o[1])
        elif _BULLET.match(x):
            bodies.append(_BULLET.sub("", x))
        else:
            return False
    return sum(1 for b in bodies if _instruction(b)) > len(bodies) / 2


def _numbered(kind: str) -> bool:
    """A label kind that may number an instruction as well as a passage ("3.", "Note 3:", "Step 3:")."""
    return kind in ("number", "source", "instruction", "bullet") or kind.startswith("word:")


def _read_labels(passages: list[str]) -> tuple[list[str], list[str | None], list[str]]:
    """The passages that are not instructions, each with its label (None when it has none) and its text
    without the label (for telling duplicates). Numbered items of one kind ("Note n:", "n.") most of which
    are one imperative line are an instruction list and are left out, as is a paragraph holding one; a word
    that numbers instructions labels nothing; any other word labels when it opens two passages or more; a
    title labels when no other passage has the same."""
    opened = [_opening(p) for p in passages]
    # a bullet without a label is an item too: a bulleted list of imperative lines is an instruction list
    opened = [o if o is not None or not _BULLET.match(p) else ("", _BULLET.sub("", p), "bullet")
              for p, o in zip(passages, opened, strict=True)]
    # one list is one word's items ("Note n", "Step n"), or the bare numbers, or the bullets
    group = [None if o is None or not _numbered(o[2]) else f"{o[2]}:{o[0].split(' ')[0].casefold()}" for o in opened]
    words = Counter(o[2] for o in opened if o is not None and o[2].startswith("word:"))
    orders = Counter(g for g in group if g)
    imperative = Counter(g for g, o in zip(group, opened, strict=True) if g and o and _instruction(o[1]))
    titles = Counter(o[0].casefold() for o in opened if o is not None and o[2] == "title")
    kept: list[str] = []
    labels: list[str | None] = []
    bodies: list[str] = []
    for p, o, g in zip(passages, opened, group, strict=True):
        if "\n" in p and _instruction_block(p):
            continue
        if o is None:
            kept.append(p)
            labels.append(None)
            bodies.append(p)
            continue
        label, body, kind = o
        if g and imperative[g] > orders[g] / 2:
            continue  # a numbered instruction ("Step 2: Greet the customer.", "1. Cite the id.")
        generic = label.casefold().strip(" :#[]()") in _SOURCE_WORDS  # "Passage: ..." on each names none
        text = body.strip() and ("<" not in body or _TAG.sub("", body).strip())
        named = bool(text) and not generic and (  # nor is the whole passage ("**...**")
            kind in ("id", "number", "source", "trail") or (kind.startswith("word:") and words[kind] >= 2)
            or (kind == "title" and titles[label.casefold()] == 1))
        kept.append(p)
        labels.append(label if named and label else None)
        bodies.append(body if named and label else p)
    # a line before or after labelled passages that speaks of them ("Here are the notes we found.", "Cite the
    # note you used.") introduces or closes them: it is no passage
    while sum(1 for x in labels if x) >= 2 and labels[0] is None and _about_them(kept[0]):
        del kept[0], labels[0], bodies[0]
    while sum(1 for x in labels if x) >= 2 and labels[-1] is None and _about_them(kept[-1]):
        del kept[-1], labels[-1], bodies[-1]
    return kept, labels, bodies


def _about_them(p: str) -> bool:
    return ("\n" not in p.strip() and len(p) <= 300
            and (imperative_opening(p) or _ABOUT.search(p) is not None))


# Shapes of texts already read, by digest: a conversation sends its whole history with every request, so the
# same turns come back each call and are hashed instead of read again. Digests and shapes only (digest_cache.py).
_SEEN: DigestCache[EvidenceShape | None] = DigestCache(4096)
_ANSWERS: DigestCache[bool] = DigestCache(1024)  # whether a system prompt says to answer from material


def shape(texts: Sequence[str]) -> EvidenceShape | None:
    """The retrieved-passage structure in a prompt's texts (system, history, user), or None when there is
    none (fewer than two passages after a cue or inside tags)."""
    found = read([("", t) for t in texts])
    return None if found is None else found[0]


def read(segments: Sequence[tuple[str, str]]) -> tuple[EvidenceShape, str] | None:
    """The retrieved-passage structure in a prompt's segments ((kind, text), kind ``system``, ``user`` or
    ``history:<role>`` as the prompt's segments are named) and where it sat: ``system``, ``user`` or
    ``history``; None when there is none. Passages in the question's own message (``user``) are read first:
    an app that keeps fixed facts in its system prompt and sends the passages a search picked beside the
    question retrieved the latter, however many facts the former holds. Else the text with the most
    passages is the one read."""
    best: tuple[EvidenceShape, str] | None = None
    digests = [digest(text) for _, text in segments]  # each text hashed once, for both caches
    for (kind, text), key in zip(segments, digests, strict=True):
        found = _SEEN.remember(key, partial(_shape_one, text)) if len(text) >= 2 * MIN_CHARS else None
        if found is None:
            continue
        at = kind.split(":", 1)[0]
        if best is None or (at == "user") > (best[1] == "user") or (
                (at == "user") == (best[1] == "user") and found.chunks_in > best[0].chunks_in):
            best = (found, at)
    # no cue: the system prompt answers from material, the user asks, then passages seen before beside others
    if best is None and any(_ANSWERS.remember(key, partial(answers_from_material, text))
                            for (kind, text), key in zip(segments, digests, strict=True) if kind == "system"):
        for kind, text in segments:
            if kind == "user" and (block := after_question(text, _opening)) is not None:
                found = _shape_block(block, _paragraphs(block))
                best = (found, "user") if found is not None and memory.passages.met_in_other_company(found.passage_keys) else best
    return best


def _shape_one(text: str) -> EvidenceShape | None:
    tagged = _tagged(text)
    if tagged is not None:
        return _result([t for t, _ in tagged], [("x" if named else None) for _, named in tagged], "xml",
                       tagged_ids=True)
    documents = inline_documents(text, _MATERIAL_WORD)
    if documents is not None:
        return _result([t for t, _ in documents], [label for _, label in documents], "json", tagged_ids=False)
    cue = None
    passages: list[str] = []
    for m in _CUE.finditer(text):
        if _source_label(m.group(0)):
            continue  # "Document 3 (updated May):" opens a passage; it announces none
        cue = m  # the last cue before the passages (an instruction may mention "sources" earlier)
        passages = _paragraphs(text[m.end():])  # the chosen cue's paragraphs: read once, kept
        if passages:
            break
    found = run(text, _opening) if not passages else None  # no line names them: passages by their shape
    if found is not None:
        return _shape_block(found, _paragraphs(found))
    return None if cue is None else _shape_block(text[cue.end():], passages)


def _shape_block(block: str, passages: list[str]) -> EvidenceShape | None:
    """The shape of the passages in ``block`` (``passages``: its paragraphs)."""
    documents = json_documents(block)
    if documents is not None:  # passages as JSON objects: each is delimited, and labelled by an id key
        return _result([t for t, _ in documents], [label for _, label in documents], "json", tagged_ids=False)
    passages, labels, bodies = _read_labels(passages)
    if len(passages) < 2:  # one passage a line, no blank lines between them
        passages, labels, bodies = _read_labels(_paragraphs(block.replace("\n", "\n\n")))
        if len(passages) < 2:
            return None
    if len(_HEADING.findall(block)) >= len(passages) - 1 and _HEADING.search(block):
        delimiter = "markdown"
    elif len(_FENCE.findall(block)) >= 2 * len(passages) - 1:
        delimiter = "fenced"
    elif len(_RULE.findall(block)) >= len(passages) - 1:
        delimiter = "rule"
    else:
        delimiter = "none"
    if delimiter == "none" and all(labels):
        delimiter = "label"  # each passage opens (or ends) with its own id: the id is the boundary
    return _result(bodies, labels, delimiter, tagged_ids=False)


def _source_label(line: str) -> bool:
    """A line that is a passage's own label: a word that names a source and an index ("Document 3:")."""
    return (w := _WORD_INDEX.match(line.strip())) is not None and w.group("word").casefold() in _SOURCE_WORDS


def _result(passages: list[str], labels: list[str | None], delimiter: str, *, tagged_ids: bool) -> EvidenceShape:
    """The shape of passages given without their labels (so one passage under two labels is a duplicate)."""
    seen: set[str] = set()
    distinct: list[int] = []
    for i, p in enumerate(passages):
        k = _key(p)
        if k not in seen:
            seen.add(k)
            distinct.append(i)
    kept = [labels[i] for i in distinct]
    scheme = ("source_id" if sum(1 for x in kept if x) >= len(kept) / 2 else "none") if tagged_ids else _scheme(kept)
    unlabelled = sum(1 for x in kept if not x) if scheme != "none" else len(kept)
    return EvidenceShape(len(passages), len(distinct), len(passages) - len(distinct), scheme, delimiter, unlabelled,
                         tuple(sorted(seen)))


def values(s: EvidenceShape, placement: str | None = None) -> dict[str, object]:
    """The ``intake.evidence_formatting`` values for a shape read off the wire, and where it sat (``read``)."""
    h = capture.hasher()  # keyed: the store never holds an unkeyed hash of prompt text
    for k in s.passage_keys:
        h.update(bytes.fromhex(k))
    return {
        N.EVIDENCE_PASSAGES_HASH: h.hexdigest() if s.passage_keys else None,
        N.EVIDENCE_PLACEMENT: placement,
        N.EVIDENCE_CHUNKS_IN: s.chunks_in,
        N.EVIDENCE_CHUNKS_OUT: s.chunks_out,
        N.EVIDENCE_DUPLICATES_REMOVED: 0,  # the app removed none: duplicates reached the model
        N.EVIDENCE_DUPLICATES_SENT: s.duplicates,
        N.EVIDENCE_ID_SCHEME: s.id_scheme,
        N.EVIDENCE_DELIMITER: s.delimiter,
        N.EVIDENCE_UNLABELLED: s.unlabelled,
        N.EVIDENCE_OBSERVED: "wire",
    }
