"""The shape of what changed between consecutive prompts of one template, computed in memory.

Hashes say *that* two prompts differ; this says *where* and *what kind of thing* differs: a request id in
the middle of the tool list, a user id in the system prompt, shuffled few-shot examples, a clock at the
top. The middleware keeps the last few prompts of each template (same model, same leading segments) in
process memory only, compares each new prompt with the closest of them, and records the first divergent
window: its segment, offsets, length, a class (credential, uuid, hex_id, base64_id, timestamp, date, epoch, counter,
number, email, id (a short id of any other shape), reordered, whitespace, invisible, free_text, fields (several
values with short fixed words between them, up to long text identical in both)), and how much of the prompt after the window is
identical to the earlier one (what moving that field to the end would make cacheable). Only these
classes, offsets and counts leave this module; the texts stay in memory and are bounded.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from llmtrace.tracer.reading.textscan import strip_hidden
from llmtrace.tracer.reading.volatile import _VOLATILE, first_difference
from llmtrace.tracer.record import capture

_MAX_TEMPLATES = 256
_PER_TEMPLATE = 8
_MAX_PROMPT_CHARS = 1_000_000  # longer prompts are not compared (memory)
_MAX_TOTAL_CHARS = 16_000_000  # all kept prompts together; the least recently used templates go first

_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.:@")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?:0x)?[0-9a-fA-F]{8,}")
_EPOCH = re.compile(r"1[5-9]\d{8}(?:\d{3})?")
_NUMBER = re.compile(r"[+-]?\d+(?:[.,]\d+)*")
_B64 = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_SHORT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{3,}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]?\d{1,2}:\d{2}.*|\d{1,2}:\d{2}(?::\d{2})?")
_WS = re.compile(r"\s+")
_WHOLE = ("free_text", "reordered", "invisible", "whitespace")  # classes whose window is already the segment's
_FIELDS_RUN_CHARS = 256  # identical text at least this long after several values: one "fields" window ahead of it


@dataclass(frozen=True, slots=True)
class Divergence:
    segment: str  # system, tools, history, user
    char_offset: int  # from the start of the rendered prompt (segments concatenated)
    segment_offset: int
    length: int  # chars of the window in the new prompt
    klass: str
    shared_prefix_chars: int
    reusable_after_chars: int


@dataclass(frozen=True, slots=True)
class _Prompt:
    joined: str
    starts: tuple[int, ...]  # offset of each segment in ``joined``
    texts: tuple[str, ...]
    kinds: tuple[str, ...]


def _segment_name(kind: str) -> str:
    return kind.split(":", 1)[0]


def _at(p: _Prompt, offset: int) -> int:
    """Index of the segment holding ``offset`` (the last one when past the end)."""
    idx = 0
    for i, start in enumerate(p.starts):
        if start <= offset:
            idx = i
        else:
            break
    return idx


def _items(kind: str, text: str) -> list[str]:
    if kind == "tools":
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, list):
            return [json.dumps(v, sort_keys=True) for v in value]
    return [line for line in text.split("\n") if line.strip()]


def _token(text: str, pos: int) -> tuple[int, int]:
    """The run of id-like characters around ``pos`` (trailing sentence punctuation left out)."""
    start = pos
    while start > 0 and text[start - 1] in _TOKEN_CHARS:
        start -= 1
    end = pos
    while end < len(text) and text[end] in _TOKEN_CHARS:
        end += 1
    while end > start and text[end - 1] in ".:,":
        end -= 1
    return start, end


def _volatile_at(text: str, pos: int) -> tuple[int, int, str] | None:
    for m in _VOLATILE.finditer(text, max(0, pos - 80)):
        group = str(m.lastgroup)
        start, end = m.start(group), m.end(group)
        if start > pos:
            return None
        if start <= pos < max(end, start + 1):
            value = m.group(group)
            if group == "timestamp":
                return start, end, "epoch" if value.isdigit() else "timestamp"
            if group in ("counter", "hash_counter"):
                return start, end, "counter"
            if group == "date":
                return start, end, "date"
            if group == "uuid":
                return start, end, "uuid"
            return start, end, _classify_id(value) or "hex_id"
    return None


def _classify_id(tok: str) -> str | None:
    if _UUID.fullmatch(tok):
        return "uuid"
    if _HEX.fullmatch(tok) and any(c.isdigit() for c in tok):
        return "hex_id"
    if _B64.fullmatch(tok) and any(c.isdigit() for c in tok) and any(c.isalpha() for c in tok):
        return "base64_id"
    if _SHORT_ID.fullmatch(tok) and any(c.isdigit() for c in tok) and any(c.isalpha() for c in tok):
        return "id"  # a short id of any shape: u-7f3a, CUS-4F2A, acct_9Hq2
    return None


def _classify_token(new: str, old: str) -> str | None:
    if not new:
        return None
    if _EMAIL.fullmatch(new):
        return "email"
    if _TIME.fullmatch(new):
        return "timestamp"
    if _DATE.fullmatch(new):
        return "date"
    if _EPOCH.fullmatch(new):
        return "epoch"
    if _NUMBER.fullmatch(new):
        if new.isdigit() and old.isdigit() and 0 < int(new) - int(old) <= 10:
            return "counter"
        return "number"
    return _classify_id(new)


def _common_suffix(a: str, b: str) -> int:
    off = first_difference(a[::-1], b[::-1])  # block-wise compare in C, not a loop per character
    return len(a) if off < 0 else off


def _reusable(prev: _Prompt, new: _Prompt, end_a: int, end_b: int) -> int:
    """Chars identical in both prompts from the end of a window (``end_a`` in ``prev``, ``end_b`` in ``new``)."""
    after = first_difference(prev.joined[end_a:], new.joined[end_b:])
    return (min(len(prev.joined) - end_a, len(new.joined) - end_b)) if after < 0 else after


def compare(prev: _Prompt, new: _Prompt, offset: int) -> Divergence:
    """The first divergent window of ``new`` against ``prev``, which agree up to ``offset``."""
    kb, ka = _at(new, offset), _at(prev, offset)
    sb, sa = new.texts[kb], prev.texts[ka]
    start_b, start_a = new.starts[kb], prev.starts[ka]
    d = offset - start_b
    klass: str | None = None
    tail = 0  # chars of the segment identical at its end in both prompts (same segment kind and offset)
    win_b = win_a = (d, d)
    if new.kinds[kb] == prev.kinds[ka] and start_a == start_b:
        tail = _common_suffix(sa[d:], sb[d:])
        seg_window = (d, len(sb) - tail), (d, len(sa) - tail)
        items_a, items_b = _items(prev.kinds[ka], sa), _items(new.kinds[kb], sb)
        if len(items_b) > 1 and items_a != items_b and sorted(items_a) == sorted(items_b):
            klass, (win_b, win_a) = "reordered", seg_window
        elif strip_hidden(sa) == strip_hidden(sb):
            klass, (win_b, win_a) = "invisible", seg_window
        elif _WS.sub("", sa) == _WS.sub("", sb):
            klass, (win_b, win_a) = "whitespace", seg_window
        elif (secret := capture.secret_at(sb, d)) is not None:
            # a key or token (a JWT minted per request): what the scrubber hides, named as such
            klass, win_b = "credential", secret
            win_a = capture.secret_at(sa, d) or _token(sa, d)
        else:
            vb, va = _volatile_at(sb, d), _volatile_at(sa, d)
            if vb is not None:
                klass, win_b = vb[2], (vb[0], vb[1])
                win_a = (va[0], va[1]) if va is not None else _token(sa, d)
            else:
                tb, ta = _token(sb, d), _token(sa, d)
                klass = _classify_token(sb[tb[0] : tb[1]], sa[ta[0] : ta[1]])
                if klass is not None:
                    win_b, win_a = tb, ta
            if klass is None:
                klass, (win_b, win_a) = "free_text", seg_window
    else:  # a segment was added, dropped or changed kind here: the whole segment is the window
        klass, win_b, win_a = "free_text", (d, len(sb)), (offset - start_a, len(sa))
    reusable = _reusable(prev, new, start_a + max(win_a[1], offset - start_a),
                         start_b + max(win_b[1], d))
    if klass not in _WHOLE and tail >= _FIELDS_RUN_CHARS and reusable < tail:
        # several values with short fixed words between them (a per-request profile: card LB-48213, branch
        # Eastgate, joined 2019) ahead of long fixed text: the text after the first value differs again before
        # the segment's identical tail, so the window is the whole stretch from the first value to that tail
        # (named "fields" however narrow: analyzers/cache/cache_loss.py weighs it as a block, which must recur in most
        # passes, so a few reused personas that differ in a word or two are not taken for it)
        klass = "fields"
        win_b = (min(win_b[0], d), max(win_b[1], len(sb) - tail))
        win_a = (min(win_a[0], d), max(win_a[1], len(sa) - tail))
        reusable = _reusable(prev, new, start_a + max(win_a[1], d), start_b + max(win_b[1], d))
    end_b = start_b + max(win_b[1], d)
    win_start = start_b + min(win_b[0], d)
    return Divergence(
        segment=_segment_name(new.kinds[kb]),
        char_offset=win_start,
        segment_offset=win_start - start_b,
        length=max(end_b - win_start, 0),
        klass=klass,
        shared_prefix_chars=win_start,
        reusable_after_chars=max(reusable, 0),
    )


class PromptHistory:
    """The last few prompts of each template, in this process only (LRU over templates)."""

    def __init__(
        self,
        max_templates: int = _MAX_TEMPLATES,
        per_template: int = _PER_TEMPLATE,
        max_total_chars: int = _MAX_TOTAL_CHARS,
    ) -> None:
        self._lock = threading.Lock()
        self._by_template: OrderedDict[str, deque[_Prompt]] = OrderedDict()
        self._max = max_templates
        self._per = per_template
        self._max_chars = max_total_chars
        self._chars = 0

    @property
    def kept_chars(self) -> int:
        return self._chars

    def clear(self) -> None:
        with self._lock:
            self._by_template.clear()
            self._chars = 0

    def _remember(self, template: str, prompt: _Prompt) -> list[_Prompt]:
        """Keep ``prompt`` (lock held); returns the earlier prompts of its template."""
        earlier = self._by_template.get(template)
        if earlier is None:
            earlier = self._by_template[template] = deque()
        else:
            self._by_template.move_to_end(template)
        candidates = list(earlier)
        earlier.append(prompt)
        self._chars += len(prompt.joined)
        if len(earlier) > self._per:
            self._chars -= len(earlier.popleft().joined)
        while self._by_template and (len(self._by_template) > self._max or self._chars > self._max_chars):
            _, dropped = self._by_template.popitem(last=False)
            self._chars -= sum(len(p.joined) for p in dropped)
        return candidates

    def observe(self, template: str, segments: Sequence[tuple[str, str]]) -> Divergence | None:
        """Compare with the closest earlier prompt of ``template``, then remember this one."""
        texts = tuple(t for _, t in segments)
        starts, pos = [], 0
        for t in texts:
            starts.append(pos)
            pos += len(t)
        if pos > _MAX_PROMPT_CHARS or not texts:
            return None
        new = _Prompt("".join(texts), tuple(starts), texts, tuple(k for k, _ in segments))
        with self._lock:
            candidates = self._remember(template, new)
        best: tuple[int, _Prompt] | None = None
        for prev in reversed(candidates):  # the most recent wins a tie
            off = first_difference(prev.joined, new.joined)
            if off < 0 or off >= len(prev.joined) or off >= len(new.joined):
                return None  # the same prompt, one that extends an earlier one, or a cut one: no window
            if best is None or off > best[0]:
                best = (off, prev)
        if best is None:
            return None
        return compare(best[1], new, best[0])


def template_key(operation: str, model: str, segments: Sequence[tuple[str, str]]) -> str:
    """Model plus the kinds of the leading segments (tools, system) that come before the conversation."""
    lead = []
    for kind, _ in segments:
        if kind.startswith("history") or kind == "user":
            break
        lead.append(kind)
    return f"{operation}|{model}|{','.join(lead)}"

