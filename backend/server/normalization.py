"""Server-side Unicode policy for prompt text: a normal form, optional removal of invisible characters,
and counts of what the text held and what the policy changed (the ``intake.normalization`` values)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from llmtrace.tracer.reading import char_folds
from llmtrace.tracer.reading.orthography import written

Form = Literal["nfc", "nfkc", "none"]

# Zero-width, word-joiner, BOM, soft hyphen and bidi controls: they render as nothing but cost tokens and
# break prefix matches between otherwise equal prompts.
_INVISIBLE = frozenset(
    [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0]
    + list(range(0x200B, 0x2010))
    + list(range(0x202A, 0x202F))
    + list(range(0x2060, 0x2070))
)
_NBSP = frozenset([0x00A0, 0x2007, 0x202F])
# Cyrillic and Greek letters drawn like Latin ones; counted only inside words that also hold Latin letters,
# so plain Russian or Greek text is not flagged.
_CONFUSABLE = frozenset("аеорсухіјѕАВЕКМНОРСТХΑΒΕΖΗΙΚΜΝΟΡΤΥΧον")


@dataclass(slots=True)
class NormalizationCounts:
    chars_changed: int = 0
    invisible_chars: int = 0
    nbsp: int = 0
    confusables: int = 0
    # what the strip and the form changed, by class of character (tracer/reading/char_folds.py)
    classes: Counter[str] = field(default_factory=Counter)

    def add(self, other: NormalizationCounts) -> None:
        self.chars_changed += other.chars_changed
        self.invisible_chars += other.invisible_chars
        self.nbsp += other.nbsp
        self.confusables += other.confusables
        self.classes.update(other.classes)


@dataclass(frozen=True, slots=True)
class NormalizationPolicy:
    form: Form = "nfc"
    strip_invisible: bool = False

    def __post_init__(self) -> None:
        if self.form not in ("nfc", "nfkc", "none"):
            raise ValueError(f"normalization form must be nfc, nfkc or none, got {self.form!r}")

    def apply(self, text: str) -> tuple[str, NormalizationCounts]:
        counts = NormalizationCounts()
        if not text or text.isascii():  # nothing to count, and ASCII is in every normal form
            return text, counts
        # (a joiner or no-break space that is the text's spelling, tracer/reading/orthography.py, is neither
        # counted nor stripped: Persian words and family emoji keep theirs)
        counts.nbsp = sum(1 for i, ch in enumerate(text) if ord(ch) in _NBSP and not written(text, i))
        hidden = [i for i, ch in enumerate(text) if _is_invisible(ch) and not written(text, i)]
        counts.invisible_chars = len(hidden)
        counts.confusables = _count_confusables(text)
        out = text
        if self.strip_invisible and hidden:
            drop = set(hidden)
            out = "".join(ch for i, ch in enumerate(text) if i not in drop)
            counts.chars_changed += len(text) - len(out)
            counts.classes.update(char_folds.stripped_classes(text, hidden))
        if self.form != "none":
            form: Literal["NFC", "NFKC"] = "NFC" if self.form == "nfc" else "NFKC"
            if not unicodedata.is_normalized(form, out):
                normalized = unicodedata.normalize(form, out)
                # Per-character changes plus what composition merged away: exact for the common cases
                # (compatibility forms, composed accents) without a full diff.
                per_char = sum(1 for ch in out if unicodedata.normalize(form, ch) != ch)
                counts.chars_changed += max(per_char, abs(len(out) - len(normalized)))
                counts.classes.update(char_folds.fold_classes(out, form))
                out = normalized
        return out, counts

    @property
    def label(self) -> str:
        return "none" if self.form == "none" else self.form.upper()


def _is_invisible(ch: str) -> bool:
    o = ord(ch)
    return o in _INVISIBLE or (o > 0x7F and unicodedata.category(ch) == "Cf")


def _count_confusables(text: str) -> int:
    if not any(ch in _CONFUSABLE for ch in text):
        return 0
    total = 0
    for word in text.split():
        if any(ch in _CONFUSABLE for ch in word) and any("a" <= ch.lower() <= "z" for ch in word):
            total += sum(1 for ch in word if ch in _CONFUSABLE)
    return total
