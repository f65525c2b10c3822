"""Retrieved chunks as a prompt shows them: how many, labelled or not, delimited or not.

The one rule for every place that sees a prompt's text: the client middleware (``adapters/client_stages.py``)
and the collector, for other instrumentations' spans. It needs nothing but the registry's names, so the collector may use it (tracer imports no adapter).

A RAG app that pastes retrieved passages into the prompt without ``format_evidence`` still shows their
structure on the wire: a block introduced by a cue ("Context:", "Use the passages below", a ``<documents>``
tag) followed by several passages. Only the *shape* is recorded (counts and scheme names), never the text,
so this runs under every capture mode but ``none``.

The rules are general, not tuned to one phrasing: a passage is a paragraph (blank-line, rule or tag
separated) of at least ``MIN_CHARS`` characters; a passage is labelled when it opens with an id of its own
(``[3]``, ``[kb-12]``, ``Doc 2:``, ``Source: x.pdf``, ``id=...``) or carries one in its tag; the block is
delimited when its passages are wrapped in tags, headed by markdown headings, fenced, or separated by rule
lines (a blank line alone does not tell the model where one source ends), or sent as JSON objects (an
array, an object holding one, or one a line), each labelled by an id-like key (``id``, ``doc_id``, ``url``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from llmtrace.tracer.record.digest_cache import DigestCache, digest
from llmtrace.tracer.registry import names as N

MIN_CHARS = 40  # shorter paragraphs are headings, questions or instructions, not retrieved passages

# A line that announces retrieved material ("Context:", "Here are the search results:", "## Sources").
_WORDS = (r"context|documents?|passages?|sources?|excerpts?|snippets?|search results?|retrieved|knowledge(?: base)?|"
          r"references?|articles?|notes|records|chunks?|results|information|materials?|extracts?|quotes?|"
          r"quotations?|pages?|docs|faqs?|kb|evidence|entries")
# A line that announces retrieved material: a heading or a line ending in a colon that names it ("Context:",
# "## Sources", "Search results:"), or a sentence pointing at it ("Answer from the passages below.").
_CUE = re.compile(
    rf"^[ \t]*(?:#{{1,6}}[ \t]*[^\n]{{0,60}}?\b(?:{_WORDS})\b[^\n]{{0,60}}"
    rf"|[^\n]{{0,100}}?\b(?:{_WORDS})\b[^\n]{{0,60}}?(?::|\.{{3}}|…)"
    rf"|[^\n]{{0,100}}?\b(?:{_WORDS})\b[ \t]+(?:below|that follow|following)\b[^\n]{{0,80}}"
    rf"|[^\n]{{0,100}}?\b(?:the following|these|below)[ \t]+(?:\w+[ \t]+)?(?:{_WORDS})\b[^\n]{{0,80}})[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_OPEN_TAG = re.compile(r"<(doc|document|source|passage|chunk|context|snippet|result|article|item)\b([^>]*)>",
                       re.IGNORECASE)
# Any other tag: it wraps a passage only when it carries an id of its own and repeats (``<note id="tax-0">``,
# ``<record key="r1">``): whatever an app calls its passages, the model sees an id on each.
_ANY_TAG = re.compile(r"<([A-Za-z][\w.:-]{0,40})\b([^<>]*)>")
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+\S", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*(?:```|~~~)", re.MULTILINE)
_RULE = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|={3,}|_{3,})[ \t]*$", re.MULTILINE)
_SPLIT = re.compile(r"\n[ \t]*\n|^[ \t]*(?:-{3,}|\*{3,}|={3,}|_{3,}|```[^\n]*|~~~[^\n]*)[ \t]*$",
                    re.MULTILINE)
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
    r"(?:doc(?:ument)?|source|passage|snippet|excerpt|article|chunk|result|title)\b[^\n:]{0,60}:|【[^】\n]{1,40}】)",
    re.IGNORECASE,
)
# id=, key=, source=, ... and their prefixed forms (doc_id=, data-key=)
_ID_ATTR = re.compile(r"(?<![\w-])(?:[\w-]*[_-])?(?:id|key|source|src|name|title|ref|url)\s*=", re.IGNORECASE)
_QUESTION = re.compile(r"^[ \t]*(?:question|query|q|task|user|instructions?|answer)[ \t]*:", re.IGNORECASE)
# a JSON document's key that names it (its id, source or title), not its content
_JSON_LABEL = re.compile(r"(?:[\w-]*[_-])?(?:id|key|source|src|url|uri|title|name|ref|path|file)|[a-z]+Id", re.IGNORECASE)
_JSON_START = re.compile(r"^[ \t]*[\[{]", re.MULTILINE)
_WS = re.compile(r"\s+")
_BULLET = re.compile(r"^[-*+•][ \t]+")
_TAG = re.compile(r"</?[A-Za-z][\w-]*[^>]*>")


@dataclass(frozen=True, slots=True)
class EvidenceShape:
    chunks_in: int  # passages found, duplicates included
    chunks_out: int  # distinct passages
    duplicates: int
    id_scheme: str  # none, index, source_id
    delimiter: str  # none, xml, markdown, fenced, rule, label
    unlabelled: int  # distinct passages without a label of their own


def _key(text: str) -> str:
    return hashlib.blake2b(_WS.sub(" ", text).strip().casefold().encode(), digest_size=8).hexdigest()


def _wrappers(block: str) -> list[re.Match[str]]:
    """The open tags that may wrap a passage: the known names, and any other name that repeats with an id."""
    known = list(_OPEN_TAG.finditer(block))
    named: dict[str, list[re.Match[str]]] = {}
    for m in _ANY_TAG.finditer(block):
        if not _OPEN_TAG.fullmatch(m.group(0)) and _ID_ATTR.search(m.group(2)):
            named.setdefault(m.group(1).casefold(), []).append(m)
    known += [m for ms in named.values() if len(ms) >= 2 for m in ms]
    return sorted(known, key=lambda m: m.start())


def _tagged(block: str) -> list[tuple[str, bool]] | None:
    """Passages wrapped in tags, each with whether its tag names it; None when the block has fewer than two."""
    out: list[tuple[str, bool]] = []
    opens = _wrappers(block)
    starts = [m.start() for m in opens]
    for k, m in enumerate(opens):
        close = re.search(rf"</{re.escape(m.group(1))}\s*>", block[m.end():], re.IGNORECASE)
        if close is None:
            continue
        end = m.end() + close.start()
        body = block[m.end(): end].strip()
        nested = k + 1 < len(starts) and starts[k + 1] < end  # a container of tagged passages, not one
        if len(body) >= MIN_CHARS and not nested:
            out.append((body, bool(_ID_ATTR.search(m.group(2))) or bool(_LABEL.match(body))))
    return out if len(out) >= 2 else None


def _paragraphs(block: str) -> list[str]:
    paras = []
    for p in _SPLIT.split(block):
        p = p.strip()
        if not p or _QUESTION.match(p) or (p.endswith("?") and "\n" not in p and len(p) < 200):
            continue  # the question or an instruction after the passages
        if len(_TAG.sub("", p).strip()) >= MIN_CHARS:
            paras.append(p)
    return paras


def _scheme(labels: Sequence[str | None]) -> str:
    given = [x for x in labels if x]
    if not given or len(given) < len(labels) / 2:
        return "none"
    return "index" if all(re.fullmatch(r"[\[(#]?\d{1,4}[\])\].:]?", x.strip()) for x in given) else "source_id"


def _label_of(p: str) -> str | None:
    m = _LABEL.match(p)
    return _BULLET.sub("", m.group(0).strip()).rstrip(":—-|").strip() if m else None


# Shapes of texts already read, by digest: a conversation sends its whole history with every request, so
# the same turns come back each call and are hashed instead of read again. Digests and shapes only
# (digest_cache.py).
_SEEN: DigestCache[EvidenceShape | None] = DigestCache(4096)


def shape(texts: Sequence[str]) -> EvidenceShape | None:
    """The retrieved-passage structure in a prompt's texts (system, history, user), or None when there is
    none (fewer than two passages after a cue or inside tags)."""
    best: EvidenceShape | None = None
    for text in texts:
        if not text or len(text) < 2 * MIN_CHARS:
            continue
        found = _SEEN.remember(digest(text), partial(_shape_one, text))
        if found is not None and (best is None or found.chunks_in > best.chunks_in):
            best = found
    return best


def _shape_one(text: str) -> EvidenceShape | None:
    tagged = _tagged(text)
    if tagged is not None:
        bodies = [t for t, _ in tagged]
        labelled = [t for t, named in tagged if named]
        return _result(bodies, [("x" if t in labelled else None) for t in bodies], "xml", tagged_ids=True)
    cue = None
    passages: list[str] = []
    for m in _CUE.finditer(text):
        cue = m  # the last cue before the passages (an instruction may mention "sources" earlier)
        passages = _paragraphs(text[m.end():])  # the chosen cue's paragraphs: read once, kept
        if passages:
            break
    if cue is None:
        return None
    block = text[cue.end():]
    documents = _json_documents(block)
    if documents is not None:  # passages as JSON objects: each is delimited, and labelled by an id key
        return _result([t for t, _ in documents], [label for _, label in documents], "json", tagged_ids=False)
    if len(passages) < 2:  # one passage a line, no blank lines between them
        passages = [p for p in _paragraphs(block.replace("\n", "\n\n")) if "\n" not in p]
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
    labels = [_label_of(p) for p in passages]
    if delimiter == "none" and all(labels):
        delimiter = "label"  # each passage opens with its own id: the id is the boundary
    return _result(passages, labels, delimiter, tagged_ids=False)


def _json_documents(block: str) -> list[tuple[str, str | None]] | None:
    """Passages given as JSON right after the cue: an array of objects (or an object holding one), or one
    object a line; each passage is an object's longest string, labelled by its id-like key's value. None
    when the block does not open with such JSON or it holds fewer than two passages."""
    start = _JSON_START.search(block)
    if start is None or block[:start.start()].strip():
        return None
    at = start.end() - 1
    decoder = json.JSONDecoder()
    try:
        doc, _ = decoder.raw_decode(block, at)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        lists = [v for v in doc.values() if isinstance(v, list)]
        doc = lists[0] if len(lists) == 1 else [doc]
    if isinstance(doc, list) and len(doc) == 1 and block[at] == "{":  # perhaps one object a line (JSON Lines)
        doc = []
        for line in block[at:].splitlines():
            if not line.strip():
                break
            try:
                doc.append(json.loads(line))
            except ValueError:
                break
    if not isinstance(doc, list):
        return None
    out: list[tuple[str, str | None]] = []
    for item in doc:
        if not isinstance(item, dict):
            return None
        strings = [v for v in item.values() if isinstance(v, str)]
        body = max(strings, key=len, default="")
        if len(body) >= MIN_CHARS:
            label = next((str(v) for k, v in item.items() if _JSON_LABEL.fullmatch(str(k)) and isinstance(v, (str, int))
                          and v != body and str(v).strip()), None)
            out.append((body, label))
    return out if len(out) >= 2 else None


def _result(passages: list[str], labels: list[str | None], delimiter: str, *, tagged_ids: bool) -> EvidenceShape:
    seen: set[str] = set()
    distinct: list[int] = []
    for i, p in enumerate(passages):
        k = _key(_LABEL.sub("", p, count=1) if labels[i] else p)
        if k not in seen:
            seen.add(k)
            distinct.append(i)
    kept = [labels[i] for i in distinct]
    scheme = ("source_id" if sum(1 for x in kept if x) >= len(kept) / 2 else "none") if tagged_ids else _scheme(kept)
    unlabelled = sum(1 for x in kept if not x) if scheme != "none" else len(kept)
    return EvidenceShape(len(passages), len(distinct), len(passages) - len(distinct), scheme, delimiter, unlabelled)


def values(s: EvidenceShape) -> dict[str, object]:
    """The ``intake.evidence_formatting`` values for a shape read off the wire."""
    return {
        N.EVIDENCE_CHUNKS_IN: s.chunks_in,
        N.EVIDENCE_CHUNKS_OUT: s.chunks_out,
        N.EVIDENCE_DUPLICATES_REMOVED: 0,  # the app removed none: duplicates reached the model
        N.EVIDENCE_DUPLICATES_SENT: s.duplicates,
        N.EVIDENCE_ID_SCHEME: s.id_scheme,
        N.EVIDENCE_DELIMITER: s.delimiter,
        N.EVIDENCE_UNLABELLED: s.unlabelled,
        N.EVIDENCE_OBSERVED: "wire",
    }
