"""Marks of an injection in text that came from outside the app's own prompt: tool output, retrieved
documents, pasted content. Counted where the text is seen (the middleware, the collector), so a store
that keeps no prompt text still says which segment carried instructions to the model.

Two marks: text that addresses the model as if it were its operator ("ignore the previous instructions",
"reveal the system prompt", "you are now ...", chat-template role tokens), and characters a person
reading the text cannot see (zero-width, bidi controls, tag characters).
"""

from __future__ import annotations

import re

from llmtrace.tracer.record.digest_cache import DigestCache, digest

# what a reader cannot see: invisible characters and bidirectional controls (also the client's
# intake.normalization counts, adapters/textscan.py, so a segment and its normalization agree)
INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200d\u2060-\u2064\ufeff\U000e0000-\U000e007f]")
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HIDDEN = re.compile(f"{INVISIBLE.pattern}|{BIDI.pattern}")
# The one list of phrases that address the model as its operator would. Every place that looks for
# instructions in text matches these: the per-segment counts the middleware and the collector record
# (prompt_segments.py), the analyzer's scan of kept text (analyzers/untrusted_input.py) and the app's own
# ``safety.scan`` (adapters/safety.py). A phrase is here only when it is an order to the model wherever it
# appears: a user asking a bot to "act as a translator" or mentioning "the system prompt" is not one.
_OVERRIDE = r"(?:ignore|disregard|forget|override|bypass)"
_EARLIER = r"(?:previous|prior|earlier|above|preceding|all|any|every|your|the|these|those|original|system)"
_RULES = r"(?:instructions?|rules|directions|guidelines|guidance|prompts?|polic(?:y|ies)|constraints|orders)"
_SECRET = (r"(?:system\s+prompt|(?:hidden|internal|secret|confidential|original)\s+(?:instructions|rules|prompt|codes?|"
           r"data)|passwords?|api[ -]?keys?|credentials|secrets?|rate\s+codes?)")
PHRASES = (
    rf"\b{_OVERRIDE}\b[^.\n]{{0,24}}\b{_EARLIER}\b[^.\n]{{0,24}}\b{_RULES}\b",  # ignore the previous rules
    rf"\b{_OVERRIDE}\s+{_RULES}\b",  # ignore instructions
    r"\b(?:ignore|disregard|override)\s+(?:(?:all|any|the|your|previous|prior|above|earlier)\s+)*context\b",
    rf"\b(?:reveal|print|output|show|leak|expose|dump|repeat|disclose|send)\b[^.\n]{{0,40}}\b{_SECRET}",
    r"\b(?:reveal|disclose|leak)\s+(?:your|the)\s+instructions\b",
    r"\b(?:send|email|post|upload|exfiltrate)\s+(?:(?:the|all|your)\s+)*"
    r"(?:conversation|chat\s+history|credentials|passwords?|api\s+keys?|secrets?)\b",
    r"\byou\s+are\s+now\b",
    r"\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must)\b",
    r"\bnew\s+(?:system\s+)?instructions?\s*:",
    r"\bdo\s+not\s+(?:tell|inform|alert|reveal\s+(?:this\s+)?to)\s+the\s+user\b",
    r"\bwithout\s+telling\s+the\s+user\b",
    r"\bdeveloper\s+mode\b",
    r"\bjailbr(?:eak|oken)\b",
    r"\bsystem\s+override\b",
    r"\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|different)\b",
    # chat-template role tokens and role headers: text that pretends a new turn begins
    r"<\|?im_start\|?>|\[/?INST\]|<\|(?:system|assistant)\|>|<<SYS>>",
    r"\bBEGIN\s+SYSTEM\b|^[ \t]*#{2,}[ \t]*system[ \t]*:?[ \t]*$",
)
# Every phrase begins with one of these (a test holds each phrase to it). Matching them in a lookahead
# first lets the scan reject a position on one character class and a short list of words instead of
# trying every phrase there: the same matches, a third of the time on prose (every segment of every
# request is scanned, so this is paid per call on the whole history).
_LEADS = ("ignor", "disregard", "forget", "overrid", "bypass", "reveal", "print", "output", "show", "leak", "expose",
          "dump", "repeat", "disclose", "send", "email", "post", "upload", "exfiltrat", "you", "from", "new", "do",
          "without", "developer", "jailbr", "system", "act", "begin")
_FIRST = "".join(sorted({c for w in _LEADS for c in (w[0], w[0].upper())}))
_START = rf"(?=[{_FIRST}<\[ \t#])(?=\b(?:{'|'.join(_LEADS)})|<|\[|^[ \t]*#)"
ORDERS = re.compile(f"{_START}(?:{'|'.join(PHRASES)})", re.IGNORECASE | re.MULTILINE)


# Counts of texts already scanned, by digest: a conversation sends its whole history with every request,
# so the same turns come back each call and are hashed (C speed) instead of scanned again. Only digests
# and counts are kept (digest_cache.py).
_SCANNED: DigestCache[int] = DigestCache(8192)
_SHORT = 256  # shorter texts are scanned again: hashing them saves nothing


def instruction_marks(text: str) -> int:
    """How many places in ``text`` address the model as its operator would (hidden characters removed
    first, so a zero-width space inside "ign\u200bore" does not hide the phrase)."""
    if len(text) < _SHORT:
        return _count_marks(text)
    return _SCANNED.remember(digest(text), lambda: _count_marks(text))


def _count_marks(text: str) -> int:
    return sum(1 for _ in ORDERS.finditer(text if text.isascii() else HIDDEN.sub("", text)))


def first_mark(text: str) -> str:
    """The first such phrase, for a finding's example (only where the text itself is kept)."""
    m = ORDERS.search(HIDDEN.sub("", text))
    return m.group(0)[:60] if m else ""


def hidden_chars(text: str) -> int:
    return 0 if text.isascii() else len(HIDDEN.findall(text))
