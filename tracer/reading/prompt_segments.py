"""A prompt as the store keeps it: one record per segment (system, tools, each history turn, user) with a
keyed hash and a hash chain over fixed-size chunks, so the analyzers can say in which segment, and at which
chunk, two prompts part without a word of them stored; and, for a long segment, keyed hashes of
content-defined pieces (``pieces``), so they can also find the long text two prompts share *after* the
place they part (fixed instructions behind a block that changes every call), which an anchored chain
cannot. The one definition for the client middleware (``tracer/reading/segments.py`` turns a request's messages
into segments) and the collector (``otlp_segments.py`` does the same for other instrumentations' spans).
"""

from __future__ import annotations

import bisect
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from functools import partial

from llmtrace.tracer.reading import untrusted_text
from llmtrace.tracer.reading.digest_cache import DigestCache, digest
from llmtrace.tracer.record import capture
from llmtrace.tracer.registry import names as N

CHUNK_CHARS = 64
# Values that change between calls of one template, most specific first (the cache analysis's classes).
_VOLATILE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("credential", capture.REDACTED_MARKER),  # a token or key, scrubbed: its marker changes when it does
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b")),
    ("timestamp", re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
                             # a clock time, seconds and AM/PM optional (10:05, 9:07 PM, 16:05:38.2)
                             r"|\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[AaPp]\.?[Mm]\b\.?)?(?!\d)")),
    ("date", re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b")),
    ("email", re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")),
    ("epoch", re.compile(r"\b1[5-9]\d{8}(?:\d{3})?\b")),
    ("hex_id", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b", re.I)),
    ("base64_id", re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9_-]{16,}={0,2}")),
    ("id", re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{3,}\b")),
    ("number", re.compile(r"\b\d{3,}\b")),
)
# segments the app writes itself; every other one (turns, tool results, pasted documents) may carry text
# from outside, which is scanned for injection marks
_OWN_KINDS = ("system", "tools", "generation_prompt")
MAX_FIELDS = 24  # per segment: a prompt full of ids is described by its first ones


def canonical(value: object) -> str:
    """Stable JSON text (sorted keys, no spaces) so equal structures hash equal."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def segment_records(segments: Iterable[tuple[str, str]], scrubbed: bool = False) -> list[dict[str, object]]:
    """One record per segment: {kind, hash, chars, chunk_hashes, pieces (long segments)} (the store's
    llmtrace.prompt.segments; ``prompt_attributes`` adds each segment's ``fields``). ``scrubbed``: the texts
    are scrubbed already (the pieces do not scrub them again)."""
    out: list[dict[str, object]] = []
    for kind, text in segments:
        rec: dict[str, object] = {"kind": kind, "hash": capture.hash_text(text), "chars": len(text),
                                  "chunk_hashes": capture.chunk_hash_chain(text, CHUNK_CHARS)}
        if len(text) >= PIECES_MIN_CHARS:
            rec["pieces"] = pieces(text if scrubbed else capture.scrub(text))
        out.append(rec)
    return out


# Content-defined pieces. A cut goes after a run of white space (or a comma, CJK punctuation) when a keyed
# CRC of the 16 chars before it falls under a threshold, so where a cut goes depends on the text around it
# alone: after an insertion or a changed block, the cuts (and so the pieces' hashes) are the same again one
# piece later, wherever the shared text now sits. Each piece is recorded as "hash:chars" (32-bit keyed BLAKE2b): the
# analyzers line two segments' pieces up to find the long identical run after the place they part.
PIECES_MIN_CHARS = 512  # a shorter segment cannot hold a block and a run worth moving it for
PIECE_CHARS = 64  # roughly the mean piece in prose, up to MAX_PIECES pieces (a 4k-char prompt: ~900 bytes)
MAX_PIECES = 256  # a longer text takes pieces twice as long per doubling: a 100k-char text ~200 pieces, ~3 KB;
# never 2 * MAX_PIECES or more
# where a cut may go: after white space, a comma or semicolon (minified JSON: a tools list, a document), or
# CJK punctuation (text without spaces)
_CUT = re.compile(r"[\s,;\u3001\u3002\uff01\uff0c\uff0e\uff1a\uff1b\uff1f]+")
_CUT_WINDOW = 16
_SHORTEST = 16  # the shortest piece, at level 0 (each level doubles it)


def pieces(text: str) -> list[str]:
    """``text`` (scrubbed) in content-defined pieces, each as "keyed hash:chars" in order; their chars add up
    to ``len(text)``. The piece size doubles with each doubling of the text past ``PIECE_CHARS * MAX_PIECES``
    chars (and once more for a text that still makes over twice ``MAX_PIECES``), so a record stays small; two
    texts compare only at the same size (no run is found between a 30k and a 40k-char version of a prompt)."""
    level = _level(len(text))
    seed = _piece_seed()
    cuts = _cuts(text, level, seed)
    while len(cuts) >= 2 * MAX_PIECES:
        level += 1
        cuts = _cuts(text, level, seed)
    out: list[str] = []
    start = 0
    for end in (*cuts, len(text)):
        h = capture.hasher()
        h.update(text[start:end].encode("utf-8", "surrogatepass"))
        out.append(f"{h.hexdigest()[:8]}:{end - start}")
        start = end
    return out


def _level(chars: int) -> int:
    level = 0
    while chars > (PIECE_CHARS << level) * MAX_PIECES:
        level += 1
    return level


def settled_after(end: int, chars: int) -> int:
    """Where two texts of about ``chars`` characters that differ before ``end`` and agree after it are cut
    into pieces alike again: a cut there looks at none of the differing text, nor is it held back by a
    shortest-piece rule started by a cut that did (nearly always; a text cut coarser than its length alone
    asks for settles later)."""
    return end + _CUT_WINDOW + (_SHORTEST << _level(chars))


def _cuts(text: str, level: int, seed: int) -> list[int]:
    # one white-space run in 8 << level: ~55 chars of prose a piece. Finer pieces place a block's end closer and
    # find shorter runs; text with few distinct cut places (one sentence repeated) still gets one
    threshold = (1 << 32) >> (3 + level)
    shortest, longest = _SHORTEST << level, 512 << level
    cuts: list[int] = []
    last = 0
    crc = zlib.crc32
    for m in _CUT.finditer(text):
        i = m.end()
        while i - last > longest:  # no cut for this long (a base64 blob, a run without spaces): a fixed one
            last += longest
            cuts.append(last)
        if i - last >= shortest and i < len(text) and \
                crc(text[i - _CUT_WINDOW:i].encode("utf-8", "surrogatepass"), seed) < threshold:
            cuts.append(i)
            last = i
    while len(text) - last > longest:
        last += longest
        cuts.append(last)
    return cuts


def _piece_seed() -> int:
    """The cut CRC's start value, from the hash key: where the cuts fall is the key's too."""
    h = capture.hasher()
    h.update(b"llmtrace.prompt.pieces")
    return int.from_bytes(h.digest()[:4], "big")


def fields(text: str) -> list[dict[str, object]]:
    """The volatile-looking values in ``text``: class, offset, length, keyed hashes of what precedes and
    follows."""
    # the values taken so far, disjoint, by start: a value overlaps one of them exactly when it overlaps
    # the last that starts before it ends (a list scan here was quadratic in a long base64 text's ids)
    starts: list[int] = []
    ends: list[int] = []
    out: list[tuple[int, int, str]] = []
    for cls, pat in _VOLATILE:
        for m in (_emails(text) if cls == "email" else _ids(text) if cls == "id" else pat.finditer(text)):
            a, b = m.start(), m.end()
            i = bisect.bisect_left(starts, b)
            if i and ends[i - 1] > a:
                continue  # inside a value a more specific class already took
            starts.insert(i, a)
            ends.insert(i, b)
            out.append((a, b, cls))
    out.sort()
    return [{"class": cls, "at": a, "chars": b - a, "before": capture.hash_text(text[:a]),
             "after": capture.hash_text(text[b:])}
            for a, b, cls in out[:MAX_FIELDS]]


_EMAIL = dict(_VOLATILE)["email"]
_EMAIL_AT_RUN = re.compile(r"(?<![\w.+-])" + _EMAIL.pattern)


def _emails(text: str) -> Iterator[re.Match[str]]:
    """``_EMAIL.finditer(text)``'s matches, found in linear time: finditer retries the pattern at every
    position of a long run of name characters with no ``@`` after it (a 20 KB hex string: 2 s). Its next
    match starts where the last one ended or at the start of a run (a match inside a run would extend
    to the char before it, which finditer tried first), so only those places are tried."""
    pos = 0
    while pos < len(text):
        m = _EMAIL.match(text, pos) or _EMAIL_AT_RUN.search(text, pos)
        if m is None:
            return
        yield m
        pos = m.end()


_ID = dict(_VOLATILE)["id"]
_ID_RUN = re.compile(r"[\w-]+")
_ID_START = re.compile(r"\b[A-Za-z0-9]")


def _ids(text: str) -> Iterator[re.Match[str]]:
    r"""``_ID.finditer(text)``'s matches in linear time: finditer tries the pattern at every word start of a
    long kebab-case run with no digit ("a-b-c-...": 20 KB took 3 s), and each try's lookaheads read to the
    run's end. A match lies inside one run of ``[\w-]`` and ends at the run's last word character, so a
    run holds one match at most, starting at its first word start if anywhere: a later start has less of
    the run ahead, so it fails wherever the first one does. Only that place is tried."""
    for run in _ID_RUN.finditer(text):
        start = _ID_START.search(text, run.start(), run.end())
        if start is not None:
            m = _ID.match(text, start.start(), run.end())
            if m is not None:
                yield m


def rendered(segments: Iterable[tuple[str, str]]) -> str:
    """The prompt as one readable text, each segment under its kind (for ``full`` capture)."""
    return "\n".join(f"[{kind}]\n{text}" for kind, text in segments)


def prompt_attributes(segments: list[tuple[str, str]], mode: str,
                      turns: Mapping[int, str] | None = None) -> dict[str, object]:
    """Pass-span attributes for the prompt under capture ``mode``.

    ``turns``: the assistant turns among the segments by index, in the canonical form the answer's
    ``llmtrace.output.hash`` has (tracer/reading/assistant_turn.py); each such segment's record carries its hash as
    ``turn`` (not for an empty turn, which carries nothing), so a later prompt that carries an answer is
    found by the answer's hash.

    Each segment is scrubbed once, first, so its ``chars``, its hashes and its place in the full-capture
    text all describe the same string (the divergence finder maps offsets between them)."""
    if mode == "none" or not segments:
        return {}
    # hash_text("") names the hash key: records remembered under one key are never served under another
    keyed = capture.hash_text("").encode()
    parts: list[str] = []
    hashes: list[str] = []
    clean: list[bool] = []
    for i, (kind, text) in enumerate(segments):
        own = kind in _OWN_KINDS
        body, seg_hash, unchanged = _RECORDS.remember(
            keyed + (b"o" if own else b"x") + digest(text), partial(_record, text, own))
        turn = turns.get(i) if turns else None
        mark = f'"turn":"{capture.hash_text(turn)}",' if turn else ""
        parts.append(f'{{"kind":{json.dumps(kind)},{mark}{body}')
        hashes.append(seg_hash)
        clean.append(unchanged)
    attrs: dict[str, object] = {
        N.PROMPT_SEGMENTS: "[" + ",".join(parts) + "]",  # what json.dumps(records) writes, byte for byte
        N.PROMPT_HASH: capture.hash_text("".join(hashes)),
    }
    if mode == "full":  # the text is never remembered: scrubbed again here, unless scrubbing changed nothing
        attrs[N.PROMPT_TEXT] = rendered((kind, text if ok else capture.scrub(text))
                                        for (kind, text), ok in zip(segments, clean, strict=True))
    return attrs


# A segment's record by (hash key, own-or-outside, digest of its text): a conversation's history comes back
# with every request, so only the new turns are scrubbed, hashed and searched for volatile values. Kept:
# the record's JSON after its kind (hashes, counts, offsets; no text), its hash, and whether scrubbing
# left the text as it was. The kind is written per call, so a "user" turn that becomes "history:user" on
# the next request is the same entry.
# Bounded in entries and in the records' JSON length (a long pasted document's record is ~30% of its size).
_RECORDS: DigestCache[tuple[str, str, bool]] = DigestCache(4096, weigh=lambda r: len(r[0]), max_weight=16 << 20)


def _record(text: str, own: bool) -> tuple[str, str, bool]:
    """The uncached work for one segment, as it always was: scrub, hash, chain, fields, marks."""
    scrubbed = capture.scrub(text)
    (rec,) = segment_records([("", scrubbed)], scrubbed=True)
    del rec["kind"]
    # the volatile-looking values of each segment, located exactly: a hashed prompt then still says which
    # value moved and where (the text around it hashed, so "the same template" is proven, not guessed)
    found = fields(scrubbed)
    if found:
        rec["fields"] = found
    if not own:  # text from outside the app's own prompt: count injection marks
        marks, hidden = untrusted_text.instruction_marks(scrubbed), untrusted_text.hidden_chars(scrubbed)
        if marks:
            rec["orders"] = marks
        if hidden:
            rec["hidden"] = hidden
    return json.dumps(rec, separators=(",", ":"))[1:], str(rec["hash"]), scrubbed == text
