"""Compaction: replace old turns with a summary, and say what the summary dropped.

``compact`` does it with the app's own ``summarize`` function; ``record_compaction`` only records a
compaction the app did its own way. Both emit ``loop.compaction`` with tokens before and after, turns
summarised, pinned items, and the names and numbers that were in the context before but not after —
the details a long session later "forgets".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

from .segments import part_text

Message = Mapping[str, Any]

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


def approx_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def message_text(m: Message) -> str:
    return part_text(m.get("content"))


@dataclass(frozen=True, slots=True)
class CompactionResult:
    messages: list[dict[str, Any]]
    compacted: bool
    tokens_before: int
    tokens_after: int
    turns_summarized: int
    pinned: int
    facts_lost: tuple[str, ...]


def record_compaction(
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    trigger_tokens: int | None = None,
    turns_summarized: int = 0,
    pinned: int = 0,
    count_tokens: Callable[[str], int] = approx_tokens,
    parent: rec.PassSpan | None = None,
) -> CompactionResult:
    """Record a compaction done elsewhere: compares the facts in ``before`` and ``after``."""
    text_before = _joined(before)
    return _compacted(
        text_before,
        count_tokens(text_before),
        after,
        turns_summarized=turns_summarized,
        pinned=pinned,
        count_tokens=count_tokens,
        trigger_tokens=trigger_tokens,
        parent=parent,
    )


def _joined(messages: Sequence[Message]) -> str:
    return "\n".join(message_text(m) for m in messages)


def _compacted(
    text_before: str,
    tokens_before: int,
    after: Sequence[Message],
    *,
    turns_summarized: int,
    pinned: int,
    count_tokens: Callable[[str], int],
    trigger_tokens: int | None,
    parent: rec.PassSpan | None,
) -> CompactionResult:
    """The result of a compaction that happened (the facts lost between the two texts), recorded."""
    text_after = _joined(after)
    lost = tuple(sorted(facts(text_before) - facts(text_after)))
    r = CompactionResult(
        [dict(m) for m in after],
        True,
        tokens_before,
        count_tokens(text_after),
        turns_summarized,
        pinned,
        lost,
    )
    _emit(r, trigger_tokens, parent)
    return r


def _unchanged(
    msgs: Sequence[Message], tokens: int, pinned: int, trigger_tokens: int, parent: rec.PassSpan | None
) -> CompactionResult:
    """The result when nothing was compacted (below the trigger, or nothing old enough to summarise)."""
    r = CompactionResult([dict(m) for m in msgs], False, tokens, tokens, 0, pinned, ())
    _emit(r, trigger_tokens, parent)
    return r


def _emit(r: CompactionResult, trigger_tokens: int | None, parent: rec.PassSpan | None) -> None:
    with rec.stage(
        S.LOOP_COMPACTION,
        {
            N.COMPACTION_TRIGGER_TOKENS: trigger_tokens,
            N.COMPACTION_TOKENS_BEFORE: r.tokens_before,
            N.COMPACTION_TOKENS_AFTER: r.tokens_after,
            N.COMPACTION_TURNS_SUMMARIZED: r.turns_summarized,
            N.COMPACTION_PINNED: r.pinned,
            N.COMPACTION_FACTS_LOST: stored_labels(r.facts_lost[:200]),
            N.COMPACTION_FACTS_LOST_COUNT: len(r.facts_lost),
            N.COMPACTION_COMPACTED: r.compacted,
        },
        parent=parent,
    ):
        pass


def compact(
    messages: Sequence[Message],
    summarize: Callable[[list[Message]], str],
    *,
    trigger_tokens: int,
    keep_last: int = 4,
    pinned: Callable[[Message], bool] | None = None,
    count_tokens: Callable[[str], int] = approx_tokens,
    parent: rec.PassSpan | None = None,
) -> CompactionResult:
    """Summarise older turns once the context passes ``trigger_tokens``.

    System messages and messages for which ``pinned(m)`` is true stay verbatim; the last ``keep_last``
    messages stay; the rest become one summary message from ``summarize(turns)``.
    """
    if trigger_tokens <= 0:
        raise ValueError("trigger_tokens must be positive")
    if keep_last < 0:
        raise ValueError("keep_last must be >= 0")
    msgs = list(messages)
    text_before = _joined(msgs)
    before_tokens = count_tokens(text_before)
    if before_tokens <= trigger_tokens:
        return _unchanged(msgs, before_tokens, 0, trigger_tokens, parent)
    split = max(len(msgs) - keep_last, 0)
    head, tail = msgs[:split], msgs[split:]
    kept_head: list[Message] = []
    to_summarize: list[Message] = []
    n_pinned = 0
    for m in head:
        if m.get("role") == "system":
            kept_head.append(m)
        elif pinned is not None and pinned(m):
            kept_head.append(m)
            n_pinned += 1
        else:
            to_summarize.append(m)
    if not to_summarize:
        return _unchanged(msgs, before_tokens, n_pinned, trigger_tokens, parent)
    summary = summarize(to_summarize)
    summary_msg = {"role": "user", "content": f"Summary of the earlier conversation:\n{summary}"}
    after = [*kept_head, summary_msg, *tail]
    return _compacted(
        text_before,
        before_tokens,
        after,
        turns_summarized=len(to_summarize),
        pinned=n_pinned,
        count_tokens=count_tokens,
        trigger_tokens=trigger_tokens,
        parent=parent,
    )
