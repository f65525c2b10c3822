"""Counting characters that change tokens without changing what a reader sees.

Shared by the client's ``intake.normalization`` values and the app's injection scan: zero-width and
other invisible characters, bidirectional controls, non-breaking spaces, and letters from other scripts
that imitate Latin ones inside otherwise Latin words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmtrace.tracer.reading import untrusted_text
from llmtrace.tracer.reading.orthography import count_unwritten, strip_unwritten

_INVISIBLE, _BIDI = untrusted_text.INVISIBLE, untrusted_text.BIDI  # one definition, shared with the prompt segments
_NBSP = untrusted_text.NBSP
# Cyrillic and Greek letters that render like Latin ones.
_CONFUSABLE_CHARS = (
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u04bb\u0501"  # а е о р с у х і ј ѕ һ ԁ
    # А В Е К М Н О Р С Т Х І Ј Ѕ
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0406\u0408\u0405"
    # ο α ν ρ ι and the capitals Α Β Ε Ζ Η Ι Κ Μ Ν Ο Ρ Τ Χ Υ
    "\u03bf\u03b1\u03bd\u03c1\u03b9"
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a7\u03a5"
)
_MIXED_WORD = re.compile(rf"[A-Za-z]*[{_CONFUSABLE_CHARS}][\w]*|[A-Za-z]+[{_CONFUSABLE_CHARS}]")
_CONF_ONE = re.compile(f"[{_CONFUSABLE_CHARS}]")
_LATIN = re.compile("[A-Za-z]")


@dataclass(frozen=True, slots=True)
class CharCounts:
    invisible: int = 0
    bidi: int = 0
    nbsp: int = 0
    confusables: int = 0

    @property
    def hidden(self) -> int:
        """Invisible plus bidi controls: characters a reader cannot see at all."""
        return self.invisible + self.bidi


def count_chars(text: str) -> CharCounts:
    if text.isascii():  # the common case costs one C-level scan
        return CharCounts()
    confusables = 0
    for m in _MIXED_WORD.finditer(text):
        word = m.group(0)
        if _LATIN.search(word):  # look-alikes only deceive inside Latin words
            confusables += len(_CONF_ONE.findall(word))
    return CharCounts(
        invisible=count_unwritten(_INVISIBLE, text),  # (a joiner that is a word's spelling is not hidden)
        bidi=len(_BIDI.findall(text)),
        nbsp=count_unwritten(_NBSP, text),
        confusables=confusables,
    )


def strip_hidden(text: str) -> str:
    """Remove invisible characters and bidi controls; turn non-breaking spaces into plain spaces (those that
    are the text's spelling stay: tracer/reading/orthography.py)."""
    return strip_unwritten(_NBSP, _BIDI.sub("", strip_unwritten(_INVISIBLE, text)), " ")
