"""The facts of a conversation's text: the names and numbers a compaction must keep, and the memo that
lets a growing conversation re-read only its new turns (``wire_facts_since``).

The middleware reads them off the wire (sessions.py) and the collector off foreign chat spans
(conversations.py); ``llmtrace.adapters.helpers.compaction`` compares them before and after the app's
own compaction. Labels are the fact itself only with ``capture="full"``, else kind and keyed hash.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# Numbers (with separators, decimals, units like 42%, $19.99) and capitalised names, including runs
# like "Acme Corp" and ids like "INV-2291". Sentence-initial common words are filtered below.
_NUMBER = re.compile(r"(?<![\w.])[$€£]?\d[\d,]*(?:\.\d+)?%?")
_NAME = re.compile(r"\b(?:[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*|[A-Z]{2,}(?:-\d+)?|[A-Z][A-Za-z]*-\d+)\b")
# Codes that mix letters and digits without a dash ("LH441", "X7K9P2", "INV2291", "ord_8fK2xQ", a UUID) and
# e-mail addresses: a summary drops them as readily as "INV-2291". A number with its unit after it ("10kg",
# "5pm", "3rd") is a number: its digits are found by _NUMBER.
_CODE = re.compile(r"(?<![\w@.+-])[A-Za-z0-9][\w-]*\d[\w-]*(?![\w@])")  # holds a digit (checked in _code)
_UNIT = re.compile(r"\d+[A-Za-z]+")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_COMMON = frozenset(
    """
The A An I It This That These Those We You He She They My Our Your His Her Their What When Where Why How
Who Which Yes No Please Thanks Thank Hi Hello Sure Okay OK And But Or If So Then Also Here There Can Could
Would Should Will Do Does Did Is Are Was Were Be Let Sorry Great Now Today User Assistant System
""".split()
)


_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*|[\"'(\[]\s*)$")


def facts(text: str) -> set[str]:
    """Names and numbers in ``text`` (the things a summary most often loses).

    A capitalised word that opens a sentence ("Tried", "Checked") is capitalised by grammar, not because
    it names something: it counts only when the text also capitalises it mid-sentence."""
    found = {n for n in (m.group(0).rstrip(",") for m in _NUMBER.finditer(text)) if _telling(n)}
    if "@" in text:
        found.update(m.group(0).rstrip(".") for m in _EMAIL.finditer(text))
    found.update(c for c in (m.group(0).rstrip("-") for m in _CODE.finditer(text)) if _code(c))
    runs: list[tuple[str, bool]] = []
    for m in _NAME.finditer(text):
        word = m.group(0)
        initial = bool(_SENTENCE_START.search(text[max(0, m.start() - 3): m.start()])) or m.start() == 0
        runs.append((word, initial and word[:1].isupper() and word.split()[0][1:].islower()))
    named_mid = {w.split()[0] for w, initial in runs if not initial}
    for word, initial in runs:
        first, _, rest = word.partition(" ")
        if initial and first not in named_mid:
            word = rest  # "Tried Acme Corp" -> "Acme Corp"; "Tried" alone -> nothing
        if not word or (word.split()[0] in _COMMON and " " not in word):
            continue
        found.add(word)
    return found


def _code(token: str) -> bool:
    """A token holding a digit is a code when it also holds a letter and is not a number with its unit."""
    return len(token) >= 3 and any(ch.isalpha() for ch in token) and not _UNIT.fullmatch(token)


def _telling(number: str) -> bool:
    """Whether a number says something a reader would miss: a unit ($5, 42%) or two digits or more
    (48213, 129.90, 30). A lone digit ("0" of a JSON flag, "step 3") is not a fact a summary loses."""
    return number[:1] in "$€£" or number.endswith("%") or sum(ch.isdigit() for ch in number) >= 2


def _kind(fact: str) -> str:
    return "number" if _NUMBER.fullmatch(fact) else "id" if any(ch.isdigit() for ch in fact) else "name"


@dataclass(frozen=True, slots=True)
class FactMemo:
    """A request's facts (``labels``) and, per text it scanned, the digests of the facts that text held.

    A conversation keeps its last request's memo, so the next request re-reads only the texts it has not
    seen (the new turns): a history that grows by a turn a call would otherwise be scanned whole each call.
    Texts are known by (digest of the text, offset in the scan budget): the facts of a text depend on
    nothing else, so a text found again gives the same facts a rescan would. Only digests are kept."""

    salt: str  # capture mode and key the labels were made under: another set-up makes other labels
    by_text: dict[tuple[bytes, int], tuple[str, ...]]
    labels: dict[str, str]  # fact digest -> label, the request's wire_facts


def _salt() -> str:
    from llmtrace.tracer import capture

    return f"{capture.mode()}:{capture.hash_text('fact:')}"


def wire_facts(texts: list[str], *, max_chars: int = 200_000) -> dict[str, str]:
    """The facts of a request's messages as the middleware keeps them in memory: a digest of each fact to
    the label a lost fact is recorded under. The label is the fact itself only with ``capture="full"``;
    otherwise its kind and a keyed hash (``id#3fa1c2``), so the store never holds the prompt's names."""
    return wire_facts_since(texts, None, max_chars=max_chars).labels


def text_digest(text: str) -> bytes:
    """What a text is known by, in a fact memo and in the middleware's conversations."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def wire_facts_since(
    texts: list[str], memo: FactMemo | None, *, max_chars: int = 200_000, digests: list[bytes] | None = None
) -> FactMemo:
    """``wire_facts`` of ``texts``, reading again only the texts ``memo`` (an earlier request's) lacks;
    ``digests``, when the caller has them, are the texts' ``text_digest``s (not computed again)."""
    from llmtrace.tracer import capture

    full = capture.mode() == "full"
    salt = _salt()
    old = memo if memo is not None and memo.salt == salt else None
    out: dict[str, str] = {}
    by_text: dict[tuple[bytes, int], tuple[str, ...]] = {}
    budget = max_chars
    for i, text in enumerate(texts):
        if budget <= 0:
            break
        key = (digests[i] if digests is not None else text_digest(text), max_chars - budget)
        text = text[:budget]
        budget -= len(text)
        known = old.by_text.get(key) if old is not None else None
        if old is not None and known is not None:
            for h in known:
                out[h] = old.labels[h]
        else:
            found: list[str] = []
            for f in facts(text):
                h = capture.hash_text("fact:" + f)
                out[h] = capture.scrub(f) if full else f"{_kind(f)}#{h[:6]}"
                found.append(h)
            known = tuple(found)
        by_text[key] = known
    return FactMemo(salt, by_text, out)


def stored_labels(found: tuple[str, ...] | list[str]) -> list[str]:
    """Lost facts as the store may keep them: themselves with ``capture="full"``, else kind and keyed hash
    (the same labels the wire reading records, so one fact reads the same from the helper and the wire)."""
    from llmtrace.tracer import capture

    if capture.mode() == "full":
        return [capture.scrub(f) for f in found]
    return [f"{_kind(f)}#{capture.hash_text('fact:' + f)[:6]}" for f in found]
