"""Invisible and non-breaking characters that are part of how a text is correctly written.

A zero-width non-joiner inside a Persian or Hindi word, the zero-width joiner that makes one family
emoji out of three faces, the tag characters of a regional flag, the narrow no-break space French puts
before "?" or inside « »: none of them hides anything from a reader; each is the spelling. Counting them
as hidden characters flags clean text in those languages (and any text with such an emoji) as tampered
with. What stays counted is what a person writing the text would not have typed: a zero-width space
inside an English word, a joiner between Latin letters, a no-break space anywhere else.

One rule, read by every place that counts or strips such characters: the app's ``intake.normalization``
counts and safety scan (tracer/reading/textscan.py), the prompt segments' hidden-character count
(tracer/reading/untrusted_text.py) and the server's normalization policy (backend/server/normalization.py).
"""

from __future__ import annotations

import re
import unicodedata

ZWNJ, ZWJ = "\u200c", "\u200d"
_NO_BREAK = frozenset("\u00a0\u202f")
# French (and Swiss) typography: a no-break space before these, and after an opening guillemet
_SPACED_BEFORE = frozenset(";:!?»›")
_SPACED_AFTER = frozenset("«‹")
_TAG_END = "\U000e007f"  # CANCEL TAG: ends the tag sequence of a subdivision flag
_BLACK_FLAG = "\U0001f3f4"


def written(text: str, i: int) -> bool:
    """Whether ``text[i]``, an invisible or no-break character, belongs to the text's spelling (see the
    module docstring). Only its neighbours are read."""
    ch = text[i]
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    if ch in _NO_BREAK:
        return after in _SPACED_BEFORE or before in _SPACED_AFTER
    if ch in (ZWNJ, ZWJ):
        if _joining_script(before) and _joining_script(after):
            return True
        return ch == ZWJ and _emoji_end(text, i) and _emoji(after)
    if "\U000e0020" <= ch <= _TAG_END:  # a flag's tags follow the black flag, up to the cancel tag
        j = i
        while j > 0 and "\U000e0020" <= text[j - 1] <= "\U000e007e":
            j -= 1
        return j > 0 and text[j - 1] == _BLACK_FLAG
    return False


def count_unwritten(pattern: re.Pattern[str], text: str) -> int:
    """Matches of ``pattern`` (single characters) in ``text`` that are not part of its spelling."""
    return sum(1 for m in pattern.finditer(text) if not written(text, m.start()))


def strip_unwritten(pattern: re.Pattern[str], text: str, repl: str = "") -> str:
    """``text`` with every match of ``pattern`` that is not part of its spelling replaced by ``repl``."""
    return pattern.sub(lambda m: m.group(0) if written(m.string, m.start()) else repl, text)


def _joining_script(ch: str) -> bool:
    """A letter or mark of a script that joins or conjoins letters (Arabic, Syriac, Hebrew, the Indic scripts
    and the rest from U+0590 on): not Latin, Greek or Cyrillic, whose words never hold a joiner."""
    if not ch or ch < "\u0590" or "\u1d00" <= ch <= "\u1fff" or "\u2c00" <= ch <= "\u2dff" or "\ua640" <= ch <= "\ua7ff":
        return False
    return unicodedata.category(ch)[0] in "LM"


def _emoji(ch: str) -> bool:
    """A pictograph that can be joined into an emoji sequence (the emoji planes, and the older symbol and
    dingbat blocks that hold ♀ ⚕ ❤ ⬛)."""
    return bool(ch) and (ch >= "\U0001f000" or "\u2190" <= ch <= "\u2bff" or ch in "\u00a9\u00ae\u203c\u2049\u2122")


def _emoji_end(text: str, i: int) -> bool:
    """Whether what stands before ``text[i]`` ends an emoji: the pictograph itself, or it followed by the
    emoji presentation selector and/or a skin-tone modifier."""
    j = i - 1
    while j >= 0 and (text[j] == "\ufe0f" or "\U0001f3fb" <= text[j] <= "\U0001f3ff"):
        j -= 1
    return j >= 0 and _emoji(text[j])
