"""What an intake transformation did to a text, by class of character: the difference between what the app
sent and what the model read, without keeping a character of either.

A normal form folds characters into others: NFKC turns "x²" into "x2", "2⁵" into "25", "10⁻³" into "10−3",
"½" into "1⁄2", "①" into "1", "ﬁ" into "fi" and full-width "ＡＢＣ" into "ABC". Some of these change what the
text says (a power becomes a digit glued to its base; a fraction becomes three characters), others only how
it is drawn. Stripping invisible characters likewise: a zero-width space between two words glues them into
one ("pay\u200bnow" -> "paynow"); one at the start of a line changes nothing.

Classes (``CLASSES``), and whether they bear meaning (``MEANING_BEARING``):
    superscript, subscript, fraction, compat_digit (circled, parenthesised, Roman, mathematical digits),
    joiner_between_letters                                                  -> meaning-bearing
    ligature, full_width, half_width, font (mathematical letters), space (compatibility spaces), composed
    (canonical composition: e + combining acute -> é), compat (other compatibility forms: µ, …, ™),
    invisible (stripped where it joined nothing)                            -> drawing only

The server's normalization policy (backend/server/normalization.py) and any other intake step that rewrites
text call :func:`fold_classes` / :func:`stripped_classes` and record the counts as ``intake.normalization``
values (:func:`encode`).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Final

MEANING_BEARING: Final = frozenset({"superscript", "subscript", "fraction", "compat_digit", "joiner_between_letters"})
CLASSES: Final = ("superscript", "subscript", "fraction", "compat_digit", "joiner_between_letters", "ligature",
                  "full_width", "half_width", "font", "space", "composed", "compat", "invisible")
_TAGS: Final = {"<super>": "superscript", "<sub>": "subscript", "<fraction>": "fraction", "<wide>": "full_width",
                "<narrow>": "half_width", "<font>": "font", "<noBreak>": "space", "<circle>": "compat_digit",
                "<square>": "compat", "<vertical>": "compat", "<small>": "compat", "<isolated>": "compat",
                "<initial>": "compat", "<medial>": "compat", "<final>": "compat"}


def char_class(ch: str) -> str:
    """The class of a character a normal form changes (see the module docstring)."""
    decomp = unicodedata.decomposition(ch)
    if not decomp:
        return "composed"  # no decomposition of its own: it changed by composing with its neighbours
    tag = decomp.split(" ", 1)[0] if decomp.startswith("<") else ""
    if not tag:
        return "composed"  # a canonical decomposition (é, Å, the ohm sign): the same letter either way
    cls = _TAGS.get(tag)
    if cls is None and tag == "<compat>":
        name = unicodedata.name(ch, "")
        if "LIGATURE" in name:
            cls = "ligature"
        elif unicodedata.category(ch).startswith("N") or "DIGIT" in name or "NUMBER" in name:
            cls = "compat_digit"  # ⒈ ⑴ Ⅻ: a number written another way
        elif unicodedata.category(ch) == "Zs":
            cls = "space"
        else:
            cls = "compat"
    cls = cls or "compat"
    if cls in ("superscript", "subscript") and len(decomp.split()) > 2:
        return "compat"  # ™ ℠: a superscript word is a sign, not a power
    if cls == "font" and unicodedata.category(ch) == "Nd":
        return "compat_digit"  # 𝟙 𝟚: a digit in a mathematical font keeps its value, but not its role
    return cls


def fold_classes(text: str, form: str) -> Counter[str]:
    """Per class, how many characters of ``text`` the normal form ``form`` (NFC or NFKC) changes."""
    out: Counter[str] = Counter()
    if not text or text.isascii():
        return out
    for ch in text:
        if ch.isascii():
            continue
        if unicodedata.normalize(form, ch) != ch:  # type: ignore[arg-type]
            out[char_class(ch)] += 1
    if not out and not unicodedata.is_normalized(form, text):  # type: ignore[arg-type]
        out["composed"] += 1  # composition across characters (a base and its combining mark)
    return out


SOFT_HYPHEN = "\u00ad"


def stripped_classes(text: str, removed: Iterable[int]) -> Counter[str]:
    """Per class, the characters at ``removed`` (indices into ``text``) that a strip took out: between two
    letters or digits it glued them (``joiner_between_letters``), elsewhere it joined nothing (nor does a soft
    hyphen inside a word: "inter\u00adnational" was one word before)."""
    out: Counter[str] = Counter()
    drop = set(removed)
    for i in sorted(drop):
        j = i - 1
        while j >= 0 and j in drop:
            j -= 1
        k = i + 1
        while k < len(text) and k in drop:
            k += 1
        before = text[j] if j >= 0 else ""
        after = text[k] if k < len(text) else ""
        # a soft hyphen is a hyphenation point inside one word: taking it out rejoins the word's own halves
        glued = before.isalnum() and after.isalnum() and text[i] != SOFT_HYPHEN
        out["joiner_between_letters" if glued else "invisible"] += 1
    return out


def meaning_chars(classes: Counter[str] | dict[str, int]) -> int:
    return sum(n for c, n in classes.items() if c in MEANING_BEARING)


def encode(classes: Counter[str] | dict[str, int]) -> list[str]:
    """The ``llmtrace.normalization.changed_classes`` value: ``class:count``, meaning-bearing first, then by
    count (a list of strings, as every OTel exporter carries one)."""
    items = sorted(((c, n) for c, n in classes.items() if n > 0),
                   key=lambda cn: (cn[0] not in MEANING_BEARING, -cn[1], cn[0]))
    return [f"{c}:{n}" for c, n in items]


def decode(value: object) -> dict[str, int]:
    """``encode``'s list back to a dict (entries that do not parse are skipped)."""
    out: dict[str, int] = {}
    if not isinstance(value, (list, tuple)):
        return out
    for item in value:
        if not isinstance(item, str) or ":" not in item:
            continue
        cls, _, n = item.rpartition(":")
        if n.isdigit():
            out[cls] = out.get(cls, 0) + int(n)
    return out
