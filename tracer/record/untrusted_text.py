"""Marks of an injection in text that came from outside the app's own prompt: tool output, retrieved
documents, pasted content. Counted where the text is seen (the middleware, the collector), so a store
that keeps no prompt text still says which segment carried instructions to the model.

Two marks: text that addresses the model as if it were its operator ("ignore the previous instructions",
"reveal the system prompt", "you are now ...", chat-template role tokens), and characters a person
reading the text cannot see (zero-width, bidi controls, tag characters).
"""

from __future__ import annotations

import re

# what a reader cannot see: invisible characters and bidirectional controls (also the client's
# intake.normalization counts, adapters/textscan.py, so a segment and its normalization agree)
INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200d\u2060-\u2064\ufeff\U000e0000-\U000e007f]")
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HIDDEN = re.compile(f"{INVISIBLE.pattern}|{BIDI.pattern}")
_OVERRIDE = r"(?:ignore|disregard|forget|override|bypass)"
_EARLIER = r"(?:previous|prior|earlier|above|preceding|all|any|every|your|the|these|those|original|system)"
_RULES = r"(?:instructions?|rules|directions|guidelines|guidance|prompts?|polic(?:y|ies)|constraints|orders)"
_SECRET = (r"(?:system prompt|(?:hidden|internal|secret|confidential|original) (?:instructions|rules|prompt|codes?|"
           r"data)|passwords?|api[ -]?keys?|credentials|secrets?|rate codes?)")
ORDERS = re.compile(
    rf"\b{_OVERRIDE}\b[^.\n]{{0,24}}\b{_EARLIER}\b[^.\n]{{0,24}}\b{_RULES}\b"
    rf"|\b(?:reveal|print|output|show|leak|expose|dump|repeat|disclose|send)\b[^.\n]{{0,40}}\b{_SECRET}"
    r"|\byou are now\b|\bfrom now on,? you (?:are|will|must)\b|\bnew (?:system )?instructions?\s*:"
    r"|\bdo not (?:tell|inform|alert) the user\b|\bwithout telling the user\b|\bdeveloper mode\b"
    r"|\bjailbr(?:eak|oken)\b|\bsystem override\b|\bact as (?:an? )?(?:unrestricted|unfiltered|different)\b"
    r"|<\|?im_start\|?>|\[/?INST\]|<\|(?:system|assistant)\|>|<<SYS>>",
    re.I)


def instruction_marks(text: str) -> int:
    """How many places in ``text`` address the model as its operator would (hidden characters removed
    first, so a zero-width space inside "ign\u200bore" does not hide the phrase)."""
    return sum(1 for _ in ORDERS.finditer(text if text.isascii() else HIDDEN.sub("", text)))


def first_mark(text: str) -> str:
    """The first such phrase, for a finding's example (only where the text itself is kept)."""
    m = ORDERS.search(HIDDEN.sub("", text))
    return m.group(0)[:60] if m else ""


def hidden_chars(text: str) -> int:
    return 0 if text.isascii() else len(HIDDEN.findall(text))
