"""Two prompts of one service and model, compared segment by segment (system, tools, history turns, user):
where they part, what the window that differs looks like, and how much of the prompt a cache could serve
if that window sat after the stable part (analyzers/cache/cache_loss.py weighs it against what the engine
reused).

The window's position is exact with full capture (text), to a chunk with hashes; with hashes a block's fixed
text is found from the content-defined pieces the recorder keeps for long segments (``piece_run``). A window up to
``FIELD_CHARS`` wide between identical text is a field (an id, a clock); a wider one is a *block* (retrieved
notes, a per-user profile) when a long run of identical text follows it in both prompts: stable text placed
after content that changes every call.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field

from llmtrace.analyzers.core.query import as_int
from llmtrace.tracer.reading.prompt_segments import settled_after
from llmtrace.tracer.record import capture

CHUNK_CHARS = 64
FIELD_CHARS = 96  # a window up to this wide between identical text is a field, not different content
# a run of identical text at least this long after a window: stable text behind it that a cache could serve if
# the window moved after it (a shorter run is not looked for past a wider window: that is different content)
BLOCK_MIN_CHARS = 256
_PROBE_CHARS = 32  # the piece of the earlier prompt looked for in the current one
_PROBES = 16  # at most this many pieces per comparison (spread over the text after the first difference)
_HEX = re.compile(r"[0-9a-f]{1,16}")

_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("credential", capture.REDACTED_MARKER),  # full capture keeps the scrubber's marker where a token was
    ("uuid", re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")),
    ("timestamp", re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(:\d{2})?|\d{1,2}:\d{2}:\d{2}")),
    ("date", re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|(mon|tue|wed|thu|fri|sat|sun)[a-z]*\b", re.I)),
    ("email", re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")),
    ("epoch", re.compile(r"\b1[5-9]\d{8}(\d{3})?\b")),
    ("hex_id", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b", re.I)),
    ("base64_id", re.compile(r"[A-Za-z0-9_-]{16,}")),
    ("id", re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{4,}\b")),  # acct_7Hq2Lx, CUS-4F2A
    ("number", re.compile(r"\d+")),
)


def classify(text: str, start: int, end: int) -> tuple[str, int]:
    """What the differing window ``text[start:end]`` looks like (uuid, timestamp, hex_id, number, ...) and
    where the value starts: a diff often begins mid-value (the minutes of a timestamp), so the first
    pattern match that overlaps the window names it."""
    window = text[start:end]
    if window and not window.strip():
        return "whitespace", start
    if any(ord(ch) in (0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00A0) for ch in window):
        return "invisible", start
    lo, hi = max(0, start - 40), min(len(text), max(end, start + 1) + 40)
    for name, pat in _CLASSES:
        for m in pat.finditer(text, lo, hi):
            if m.start() <= max(end, start + 1) - 1 and m.end() > start:
                return name, m.start()
    return "free_text", start


@dataclass(slots=True)
class _Prompt:
    segs: list[dict[str, object]]
    texts: list[str] | None  # segment texts (full capture)
    chars: int
    hashes: list[str] = field(default_factory=list)
    stable_chars: int = 0  # chars outside the user's own (last) turn
    tail_from: int = 0  # index of the first segment of the user's own turn (the trailing user segments)

    def __post_init__(self) -> None:
        self.hashes = [str(s.get("hash")) for s in self.segs]
        self.tail_from = _tail_from(self.segs)
        self.stable_chars = sum(as_int(s.get("chars")) for s in self.segs[:self.tail_from])


def _segments(raw: object, text: object) -> _Prompt | None:
    try:
        segs = json.loads(str(raw)) if raw is not None else None
    except ValueError:
        segs = None
    if not isinstance(segs, list) or not segs or not all(isinstance(s, dict) for s in segs):
        return None
    texts: list[str] | None = None
    if all(isinstance(s.get("text"), str) for s in segs):
        # the server keeps each segment's text in its record (its prompt text is the rendered template,
        # not the "[kind]" layout the adapters write)
        texts = [str(s["text"]) for s in segs]
    elif isinstance(text, str):
        texts, pos = [], 0
        for s in segs:  # the adapters render "\n".join(f"[{kind}]\n{text}")
            pos += len(f"[{s.get('kind')}]\n")
            n = as_int(s.get("chars"))
            texts.append(text[pos:pos + n])
            pos += n + 1
        if any(len(t) != as_int(s.get("chars")) for t, s in zip(texts, segs, strict=False)):
            texts = None
    return _Prompt(segs, texts, sum(as_int(s.get("chars")) for s in segs))


def _lcp(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search on slice equality (C speed) instead of a per-character loop
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _lcs(a: str, b: str, limit: int) -> int:
    """Length of the common suffix, at most ``limit``."""
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class _Compare:
    prefix: int  # chars shared from the start
    shared: int  # chars a cache could serve if the window sat at the end
    segment: str = ""
    seg_offset: int | None = None  # None: the prompts do not part inside a segment (one extends the other)
    window_class: str = ""
    window_text: str | None = None
    distinct: bool = False  # the prompts differ in content (another template), not in a field
    width: int = 0  # chars of the window in the current prompt (a block's size)
    run: int = 0  # chars of the stable run found after a wide window or in the user's turn (judged by size)
    run_at: int | None = None  # where that run starts in the segment (``seg_index``) of the current prompt
    seg_index: int | None = None  # None: no run was found
    anchor: int = 0  # with hashes only: the fingerprint piece_run gives the run
    value_class: str = ""  # a block in the user's turn no wider than a field: what the value in it looks like


def _tail_from(segs: list[dict[str, object]]) -> int:
    """Where the user's own turn starts: the trailing run of user segments. An earlier user turn is history,
    as stable as the system prompt (a tag in the first turn of a conversation breaks every later call)."""
    i = len(segs)
    while i > 0 and str(segs[i - 1].get("kind")) == "user":
        i -= 1
    return i


def _split_index(cur: _Prompt, prev: _Prompt) -> int:
    """The first segment whose hash differs (the shorter prompt's length when one extends the other)."""
    return next((i for i, (x, y) in enumerate(zip(cur.hashes, prev.hashes, strict=False)) if x != y),
                min(len(cur.segs), len(prev.segs)))


def _compare(cur: _Prompt, prev: _Prompt) -> _Compare:
    """Where and how two prompts part. The offset inside the segment is told from the message's own start:
    a server's segment is the message as its chat template rendered it, with the template's text ahead of
    the message's (the segment's ``lead``, in chars)."""
    si = _split_index(cur, prev)
    c = _parting(cur, prev, si)
    lead = as_int(cur.segs[si].get("lead")) if si < len(cur.segs) else 0
    if lead > 0 and c.seg_offset is not None and c.seg_offset >= lead:
        c.seg_offset -= lead
    return c


def _parting(cur: _Prompt, prev: _Prompt, si: int) -> _Compare:
    a, b = cur.segs, prev.segs
    ha, hb = cur.hashes, prev.hashes
    before = sum(as_int(s.get("chars")) for s in a[:si])
    if si >= len(a) or si >= len(b):  # one extends the other: a growing conversation
        return _Compare(before, before)
    kind = str(a[si].get("kind"))
    # everything after the first differing segment that appears, unchanged, in the earlier prompt
    rest_prev = set(hb[si + 1:])
    later = sum(as_int(a[j].get("chars")) for j in range(si + 1, cur.tail_from) if ha[j] in rest_prev)
    if si >= cur.tail_from:  # the user's own turn: new by nature, unless long fixed text follows what changed
        return _tail_block(cur, prev, si, before, kind)
    # reordered segments (shuffled few-shot examples): the same hashes in another order
    tail_a, tail_b = ha[si:cur.tail_from], hb[si:prev.tail_from]
    if len(tail_a) > 1 and sorted(tail_a) == sorted(tail_b):
        moved = sum(as_int(s.get("chars")) for s in a[si:cur.tail_from])
        return _Compare(before, before + moved, kind, 0, "reordered")
    sa, sb = a[si], b[si]
    ca, cb = as_int(sa.get("chars")), as_int(sb.get("chars"))
    if cur.texts is not None and prev.texts is not None:
        ta, tb = cur.texts[si], prev.texts[si]
        p = _lcp(ta, tb)
        s = _lcs(ta, tb, min(len(ta), len(tb)) - p)
        window = ta[p:len(ta) - s]
        width = max(len(window), len(tb) - p - s)
        if width <= FIELD_CHARS and (p + s) >= 0.5 * max(ca, 1):
            cls, at = classify(ta, p, len(ta) - s)
            return _Compare(before + p, before + p + s + later, kind, at, cls, ta[at:max(len(ta) - s, at + 1)][:48])
        at, run = _stable_run(ta, tb, p, s)
        if run >= BLOCK_MIN_CHARS:  # a wide window (retrieved notes, a profile) ahead of long fixed text
            after = later if at + run == len(ta) else 0
            return _Compare(before + p, before + p + run + after, kind, p, "block", ta[p:at][:48], width=at - p,
                            run=run, run_at=at, seg_index=si)
        return _Compare(before + p, before + p, kind, p, "free_text", window[:48], distinct=True)
    # hashes only: the chunk chain gives the offset to 64 chars; equal lengths suggest a fixed-width field
    p = _chain_split(sa, sb)
    fld = _recorded_field(sa, sb, p)
    listed_width = fld[1] if fld is not None else None
    if fld is not None and listed_width is not None:  # a listed value, the text around it proven unchanged
        at, cls = fld[0], fld[2]
        return _Compare(before + at, before + ca - listed_width + later, kind, at, cls)
    if ca == cb and ca - p > CHUNK_CHARS:  # same length: a field, placed by the listed value that starts it
        at, cls = (fld[0], fld[2]) if fld is not None else (p, "field")
        return _Compare(before + at, before + ca - CHUNK_CHARS + later, kind, at, cls)
    found = piece_run(sa, sb, p)
    if found is not None:  # a block (or a field the collector could not list) ahead of long identical text
        at, run, anchor = found
        after = later if at + run == ca else 0
        # (where the run starts past a change of unknown end is the hash key's: a name of another length is called
        # a block under some keys; testing the cuts instead called 200-char blocks fields under others)
        cls = "block" if at - p > FIELD_CHARS else "field"
        return _Compare(before + p, before + p + run + after, kind, p, cls, width=at - p, run=run, run_at=at,
                        seg_index=si, anchor=anchor)
    return _Compare(before + p, before + p, kind, p, "free_text", distinct=True)


def _chain_split(sa: dict[str, object], sb: dict[str, object]) -> int:
    """Where two segments' chunk chains part, in chars of ``sa`` (to a chunk)."""
    chain_a, chain_b = _strs(sa.get("chunk_hashes")), _strs(sb.get("chunk_hashes"))
    ci = next((i for i, (x, y) in enumerate(zip(chain_a, chain_b, strict=False)) if x != y), min(len(chain_a), len(chain_b)))
    return min(ci * CHUNK_CHARS, as_int(sa.get("chars")))


@dataclass(slots=True)
class _PieceIndex:
    hashes: list[str]
    starts: list[int]  # where each piece starts, and the segment's length last
    where: dict[str, list[int]]  # the indexes of each hash (its first 16: a table's repeated rows)


_NO_PIECES = _PieceIndex([], [0], {})


def _piece_index(seg: dict[str, object]) -> _PieceIndex:
    """A segment record's content-defined pieces, parsed once per record (a pass is compared with up to 16
    earlier ones, and each of them with the passes after it): kept in the record under a key of its own."""
    got = seg.get(_INDEX_KEY)
    if isinstance(got, _PieceIndex):
        return got
    hashes: list[str] = []
    starts = [0]
    where: dict[str, list[int]] = {}
    for item in _strs(seg.get("pieces")):
        h, _, n = item.partition(":")
        if not n.isdigit():
            hashes = []
            break
        spots = where.setdefault(h, [])
        if len(spots) < 16:
            spots.append(len(hashes))
        hashes.append(h)
        starts.append(starts[-1] + int(n))
    index = _PieceIndex(hashes, starts, where) if hashes and starts[-1] == as_int(seg.get("chars")) else _NO_PIECES
    seg[_INDEX_KEY] = index
    return index


_INDEX_KEY = "\x00pieces"


def _same_for(a: list[str], b: list[str], i: int, j: int) -> int:
    """How many items from ``a[i]`` on equal those from ``b[j]`` on (slice compares, in C)."""
    lo, hi = 0, min(len(a) - i, len(b) - j)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[i:i + mid] == b[j:j + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def piece_run(sa: dict[str, object], sb: dict[str, object], p: int) -> tuple[int, int, int] | None:
    """With hashes only: the longest run of identical content-defined pieces (``pieces``, recorded for long
    segments) that starts at or after ``p`` (where the chunk chains part) in both segments, at least
    ``BLOCK_MIN_CHARS`` long, as (its start in ``sa``, its chars, a fingerprint of it); None without one.

    A piece's cuts depend on the text around them alone, so the same text after a changed block is cut alike
    in both prompts from its first cut on: the run starts at most a piece after the block ends (the block's
    width is that much too wide). The fingerprint (as ``run_anchor``'s: the same fixed text gives the same one
    whichever pass it is measured in) is the hash of the run's last piece when the run reaches the segment's
    end, else the smallest hash among its pieces but the first and last (where a run starts and ends moves by
    a piece with the text around it)."""
    ia, ib = _piece_index(sa), _piece_index(sb)
    ha, hb, at = ia.hashes, ib.hashes, ia.starts
    if not ha or not hb:
        return None
    i0, j0 = bisect.bisect_left(at, p, 0, len(ha)), bisect.bisect_left(ib.starts, p, 0, len(hb))
    best: tuple[int, int] | None = None  # (first piece, pieces)
    most = BLOCK_MIN_CHARS - 1
    for i in range(i0, len(ha)):
        if at[-1] - at[i] <= most:
            break  # no run from here on can be longer than the one found
        for j in ib.where.get(ha[i], ()):
            if j < j0 or i > i0 and j > j0 and ha[i - 1] == hb[j - 1]:
                continue  # before the first difference, or inside a run already measured from its start
            k = _same_for(ha, hb, i, j)
            if at[i + k] - at[i] > most:
                best, most = (i, k), at[i + k] - at[i]
    if best is None:
        return None
    i, k = best
    # to the segment's end: its last piece, wherever the run starts; else the pieces inside it
    inner = ha[i + k - 1:i + k] if i + k == len(ha) else ha[i + 1:i + k - 1] or ha[i:i + k]
    return at[i], most, min(int(h, 16) if _HEX.fullmatch(h) else 0 for h in inner)


def _tail_block(cur: _Prompt, prev: _Prompt, si: int, before: int, kind: str) -> _Compare:
    """The user's own turn differs: new text by nature, unless (full capture) a long run of identical text
    follows the first difference in both, instructions pasted after a changing block in the same message
    (with hashes only: a run of identical pieces, ``piece_run``)."""
    if str(prev.segs[si].get("kind")) != kind:
        return _Compare(before, before)
    if cur.texts is None or prev.texts is None:
        sa, sb = cur.segs[si], prev.segs[si]
        if min(as_int(sa.get("chars")), as_int(sb.get("chars"))) < 2 * BLOCK_MIN_CHARS:
            return _Compare(before, before)
        p = _chain_split(sa, sb)
        found = piece_run(sa, sb, p)
        if found is None:
            return _Compare(before, before)
        at, run, anchor = found
        fld = _recorded_field(sa, sb, p)
        # a listed value where the change starts (the text after it holds the question, so its end is not proven)
        value = fld[2] if fld is not None and p <= fld[0] < at and _run_follows_value(sa, fld[0], at) else ""
        return _Compare(before + p, before + p + run, kind, p, "block", width=at - p, run=run, run_at=at,
                        seg_index=si, anchor=anchor, value_class=value)
    ta, tb = cur.texts[si], prev.texts[si]
    if min(len(ta), len(tb)) < 2 * BLOCK_MIN_CHARS:  # a question, not a block and instructions
        return _Compare(before, before)
    p = _lcp(ta, tb)
    at, run = _stable_run(ta, tb, p, _lcs(ta, tb, min(len(ta), len(tb)) - p))
    if run < BLOCK_MIN_CHARS:
        return _Compare(before, before)
    # a block whatever its width: the fixed text after it is the finding, and the checks on a block's run apply
    value = classify(ta, p, at)[0] if at - p <= FIELD_CHARS else ""
    return _Compare(before + p, before + p + run, kind, p, "block", ta[p:at][:48], width=at - p, run=run, run_at=at,
                    seg_index=si, value_class="" if value == "free_text" else value)


def run_anchor(prompt: _Prompt, c: _Compare) -> int:
    """A fingerprint of the stable run ``c`` found (0 without one): the smallest hash of the 32-char pieces
    starting 32 to 96 chars into it. Where a run starts moves by the few chars the blocks before it happen to
    share at their ends; past that margin the same fixed text gives the same pieces, so (almost always) the
    same smallest one, and other shared text (a chunk retrieved twice, a document's tail) another."""
    if prompt.texts is None or c.run < 4 * _PROBE_CHARS or c.seg_index is None or c.run_at is None:
        return c.anchor
    text, lo = prompt.texts[c.seg_index], c.run_at + _PROBE_CHARS
    return min(hash(text[i:i + _PROBE_CHARS]) for i in range(lo, lo + 2 * _PROBE_CHARS))


def _stable_run(ta: str, tb: str, p: int, s: int) -> tuple[int, int]:
    """The longest run of identical text after the first difference ``p`` of ``ta`` and ``tb`` that this finds,
    as (start in ``ta``, length): their common suffix (``s`` chars) when it is long, else a run found from
    pieces of ``tb`` taken at even steps after ``p`` and looked up in ``ta`` (str.find and slice compares, all
    in C), each hit extended both ways. A step is at most ``BLOCK_MIN_CHARS - _PROBE_CHARS``, so a run that
    long is always hit, or a sixteenth of the text when that is longer (a run worth naming is a large part of
    the prompt). Returns a length under ``BLOCK_MIN_CHARS`` when there is none."""
    best = (len(ta) - s, s)
    if s >= BLOCK_MIN_CHARS or min(len(ta), len(tb)) - p < BLOCK_MIN_CHARS:
        return best
    step = max(BLOCK_MIN_CHARS - _PROBE_CHARS, (len(tb) - p) // _PROBES)
    shift = len(ta) - len(tb)  # the alignment of text at the same distance from both ends
    done = p  # pieces of tb before this lie in a run already found
    for i in range(p + 1, len(tb) - _PROBE_CHARS + 1, step):
        if i < done:
            continue
        piece = tb[i:i + _PROBE_CHARS]
        hits = {ta.find(piece, p + 1)}
        if i + shift > p and ta.startswith(piece, i + shift):
            hits.add(i + shift)
        for j in hits:
            if j <= p:
                continue
            back = _lcs(ta[p + 1:j], tb[p + 1:i], min(j, i) - p - 1)
            n = back + _lcp(ta[j:], tb[i:])
            if n > best[1]:
                best, done = (j - back, n), i - back + n
    return best


def _run_follows(seg: dict[str, object], end: int, at: int) -> bool:
    """Whether the identical run at ``at`` may follow a change that ends at ``end`` with nothing else changed
    between them: text that is the same in both prompts past the change is cut alike from where the cuts
    settle (``settled_after``), and a shared cut starts the run, so a cut of ``seg`` between there and ``at``
    proves other text changed too. (The run's distance from the change alone says little: how far the first
    settled cut falls depends on the hash key; a bound of 96 chars missed a uuid one key in four.)"""
    starts = _piece_index(seg).starts
    i = bisect.bisect_left(starts, settled_after(end, as_int(seg.get("chars"))))
    return i == len(starts) or starts[i] >= at


def _run_follows_value(seg: dict[str, object], start: int, at: int) -> bool:
    """``_run_follows`` the listed value at ``start``."""
    chars = next((as_int(f.get("chars")) for f in _fields(seg) if as_int(f.get("at")) == start), 0)
    return _run_follows(seg, start + chars, at)


def _fields(seg: dict[str, object]) -> list[dict[str, object]]:
    found = seg.get("fields")
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _recorded_field(sa: dict[str, object], sb: dict[str, object], p: int) -> tuple[int, int | None, str] | None:
    """A volatile-looking value both segments list (``fields``: class, offset, length, hashes of the text
    before and after it, as the middleware, the collector and the server record them for hashed prompts)
    that ends past the first differing chunk (starting at ``p``) at the same offset after the same text in
    both: (offset, width, class of the current one). The width is None when the text after it differs too (a
    second value right after it, as in an id written in two parts): where the change starts is proven,
    not where it ends."""
    theirs = {(f.get("at"), f.get("before")): f.get("after") for f in _fields(sb)}
    mine = _fields(sa)
    for n, f in enumerate(mine):
        if as_int(f.get("at")) + as_int(f.get("chars")) <= p:
            continue
        if as_int(f.get("at")) >= p + CHUNK_CHARS:
            return None  # the chunk that differs holds no listed value: something else changed there
        key = (f.get("at"), f.get("before"))
        if key not in theirs:
            continue
        # the next value after the same text in both: everything up to it, this value too, is unchanged (a year
        # ahead of the clock time that moved)
        if n + 1 < len(mine) and (mine[n + 1].get("at"), mine[n + 1].get("before")) in theirs:
            continue
        width = as_int(f.get("chars")) if theirs[key] == f.get("after") else None
        return as_int(f.get("at")), width, str(f.get("class"))
    return None


def _strs(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []
