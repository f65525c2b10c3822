"""Intake helpers: the prompt the app builds before any client call.

- ``SystemPromptAssembler`` / ``assemble_system_prompt``: fill a template, report the first field that
  changes between calls (by shape — timestamp, date, UUID, counter, request id — and by comparing with
  the previous assembly) as ``intake.system_prompt``.
- ``format_evidence``: dedupe retrieved chunks, label and delimit them, record the scheme
  (``intake.evidence_formatting``).
- ``order_context``: put items in an order (as given, relevance last, ends first) and record where the
  key items landed (``intake.context_ordering``).
Each works alone; each emits its stage span under ``parent`` or the current span.
"""

from __future__ import annotations

import hashlib
import re
import string
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmtrace.tracer import capture
from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading import volatile
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

# ── system prompt assembly ────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class AssembledPrompt:
    text: str
    hash: str
    volatile_offset: int  # -1: nothing volatile found
    volatile_kind: str | None  # timestamp, date, uuid, counter, request_id, or "changed"
    volatile_field: str | None  # the template field holding it, when known
    changed_offset: int  # where this assembly first differs from the previous one (-1: same or first)

    @property
    def chars(self) -> int:
        return len(self.text)


def _render(template: str, values: Mapping[str, object]) -> tuple[str, list[tuple[str, int, int]]]:
    """Render with str.format syntax, remembering where each field's value landed."""
    out: list[str] = []
    spans: list[tuple[str, int, int]] = []
    pos = 0
    fmt = string.Formatter()
    for literal, field, spec, conv in fmt.parse(template):
        out.append(literal)
        pos += len(literal)
        if field is None:
            continue
        if field == "" or field.isdigit():
            raise ValueError("system prompt templates take named fields only, like {today}")
        obj, _ = fmt.get_field(field, (), values)
        obj = fmt.convert_field(obj, conv)
        text = fmt.format_field(obj, spec or "")
        spans.append((field.split(".")[0].split("[")[0], pos, pos + len(text)))
        out.append(text)
        pos += len(text)
    return "".join(out), spans


def _field_at(spans: list[tuple[str, int, int]], offset: int) -> str | None:
    for name, a, b in spans:
        if a <= offset < max(b, a + 1):
            return name
    return None


class SystemPromptAssembler:
    """A system-prompt template used call after call; remembers the last assembly to spot what moved."""

    def __init__(self, template: str, *, name: str = "system") -> None:
        if not isinstance(template, str):
            raise ValueError("template must be a string")
        self.template = template
        self.name = name
        self._last: str | None = None
        self._lock = threading.Lock()

    def assemble(
        self, values: Mapping[str, object] | None = None, *, parent: rec.PassSpan | None = None, **kw: object
    ) -> AssembledPrompt:
        vals = {**(values or {}), **kw}
        text, spans = _render(self.template, vals)
        with self._lock:
            previous, self._last = self._last, text
        return _record(text, spans, previous, parent)


def assemble_system_prompt(
    template: str,
    values: Mapping[str, object] | None = None,
    *,
    previous: str | None = None,
    parent: rec.PassSpan | None = None,
) -> AssembledPrompt:
    """One-off assembly; pass the previous call's text as ``previous`` to find what changed."""
    text, spans = _render(template, dict(values or {}))
    return _record(text, spans, previous, parent)


def _record(
    text: str, spans: list[tuple[str, int, int]], previous: str | None, parent: rec.PassSpan | None
) -> AssembledPrompt:
    changed = volatile.first_difference(previous, text) if previous is not None else -1
    shape_off, shape_kind = volatile.first_volatile(text)
    kind: str | None
    if changed >= 0 and (shape_off < 0 or changed <= shape_off):
        off, kind = changed, volatile.kind_at(text, changed)
    else:
        off, kind = shape_off, shape_kind
    field = _field_at(spans, off) if off >= 0 else None
    result = AssembledPrompt(text, capture.hash_text(text), off, kind, field, changed)
    values: dict[str, object] = {
        N.SYSTEM_CHARS: len(text),
        N.SYSTEM_HASH: result.hash if capture.mode() != "none" else None,
        N.SYSTEM_VOLATILE_OFFSET: off,
        N.SYSTEM_VOLATILE_KIND: kind,
        N.SYSTEM_VOLATILE_FIELD: field,
        N.SYSTEM_CHANGED_OFFSET: changed,
    }
    if capture.mode() == "full" and off >= 0:
        values[N.SYSTEM_VOLATILE_TEXT] = capture.scrub(text[off : off + 40])
    with rec.stage(S.INTAKE_SYSTEM_PROMPT, values, parent=parent):
        pass
    return result


# ── evidence formatting ───────────────────────────────────────────────────────────────────────

ID_SCHEMES = ("none", "index", "source_id")
DELIMITERS = ("none", "xml", "markdown", "fenced")


@dataclass(frozen=True, slots=True)
class Evidence:
    text: str
    source: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class FormattedEvidence:
    text: str
    chunks: tuple[Evidence, ...]
    duplicates_removed: int
    id_scheme: str
    delimiter: str


_WS = re.compile(r"\s+")


def _dedupe_key(text: str) -> str:
    return hashlib.blake2b(_WS.sub(" ", text).strip().casefold().encode(), digest_size=8).hexdigest()


def _label(chunk: Evidence, i: int, scheme: str) -> str | None:
    if scheme == "index":
        return str(i + 1)
    if scheme == "source_id":
        return chunk.id or chunk.source or str(i + 1)
    return None


def _str_or_none(value: object) -> str | None:
    """A chunk's source or id as text; None when absent or empty (every reader treats both alike)."""
    return str(value) if value else None


def format_evidence(
    chunks: Iterable[Evidence | str | Mapping[str, object]],
    *,
    id_scheme: str = "source_id",
    delimiter: str = "xml",
    dedupe: bool = True,
    parent: rec.PassSpan | None = None,
) -> FormattedEvidence:
    """Dedupe (whitespace and case insensitive), label and delimit retrieved chunks."""
    if id_scheme not in ID_SCHEMES:
        raise ValueError(f"id_scheme must be one of {ID_SCHEMES}, got {id_scheme!r}")
    if delimiter not in DELIMITERS:
        raise ValueError(f"delimiter must be one of {DELIMITERS}, got {delimiter!r}")
    items: list[Evidence] = []
    for c in chunks:
        if isinstance(c, Evidence):
            items.append(c)
        elif isinstance(c, str):
            items.append(Evidence(c))
        elif isinstance(c, Mapping):
            items.append(
                Evidence(
                    str(c.get("text", "")), _str_or_none(c.get("source")), _str_or_none(c.get("id"))
                )
            )
        else:
            raise ValueError(f"evidence chunks are Evidence, str or mappings, got {type(c).__name__}")
    kept: list[Evidence] = []
    seen: set[str] = set()
    for item in items:
        key = _dedupe_key(item.text)
        if dedupe and key in seen:
            continue
        seen.add(key)
        kept.append(item)
    parts: list[str] = []
    for i, item in enumerate(kept):
        label = _label(item, i, id_scheme)
        src = f' source="{item.source}"' if item.source else ""
        if delimiter == "xml":
            attr = f' id="{label}"' if label else ""
            parts.append(f"<document{attr}{src}>\n{item.text}\n</document>")
        elif delimiter == "markdown":
            head = " ".join(x for x in (f"[{label}]" if label else "", item.source or "") if x)
            parts.append(f"### {head or 'Document'}\n{item.text}")
        elif delimiter == "fenced":
            head = " ".join(
                x
                for x in (f"id={label}" if label else "", f"source={item.source}" if item.source else "")
                if x
            )
            parts.append(f"```{head}\n{item.text}\n```")
        else:
            parts.append(f"[{label}] {item.text}" if label else item.text)
    result = FormattedEvidence("\n\n".join(parts), tuple(kept), len(items) - len(kept), id_scheme, delimiter)
    with rec.stage(
        S.INTAKE_EVIDENCE_FORMATTING,
        {
            N.EVIDENCE_CHUNKS_IN: len(items),
            N.EVIDENCE_CHUNKS_OUT: len(kept),
            N.EVIDENCE_DUPLICATES_REMOVED: result.duplicates_removed,
            N.EVIDENCE_ID_SCHEME: id_scheme,
            N.EVIDENCE_DELIMITER: delimiter,
            N.EVIDENCE_UNLABELLED: sum(
                1 for i, c in enumerate(kept) if _label(c, i, id_scheme) is None
            ),
        },
        parent=parent,
    ):
        pass
    return result


# ── context ordering ──────────────────────────────────────────────────────────────────────────

STRATEGIES = ("as_given", "relevance_last", "ends_first")


@dataclass(frozen=True, slots=True)
class ContextItem:
    text: str
    relevance: float = 0.0
    key: bool = False  # an item the answer depends on; where it lands is what gets recorded


def _ends_first(items: list[ContextItem]) -> list[ContextItem]:
    # Most relevant at both ends, least relevant in the middle (a "U"): alternate front and back.
    ranked = sorted(items, key=lambda it: it.relevance, reverse=True)
    front: list[ContextItem] = []
    back: list[ContextItem] = []
    for i, it in enumerate(ranked):
        (front if i % 2 == 0 else back).append(it)
    return front + back[::-1]


def order_context(
    items: Sequence[ContextItem], strategy: str = "as_given", *, parent: rec.PassSpan | None = None
) -> list[ContextItem]:
    """Order items and record where the key items (or, when none is marked, the most relevant) landed."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    lst = list(items)
    if strategy == "relevance_last":
        ordered = sorted(lst, key=lambda it: it.relevance)  # stable: ties keep their order
    elif strategy == "ends_first":
        ordered = _ends_first(lst)
    else:
        ordered = lst
    keys = [it for it in ordered if it.key]
    if not keys and ordered:
        keys = [max(ordered, key=lambda it: it.relevance)]
    total = sum(len(it.text) for it in ordered) or 1
    positions: list[float] = []
    pos = 0
    key_ids = {id(k) for k in keys}
    for it in ordered:
        if id(it) in key_ids:
            positions.append(round((pos + len(it.text) / 2) / total, 4))
        pos += len(it.text)
    middle = sum(1 for p in positions if 1 / 3 < p < 2 / 3)
    with rec.stage(
        S.INTAKE_CONTEXT_ORDERING,
        {
            N.ORDERING_ITEMS: len(ordered),
            N.ORDERING_STRATEGY: strategy,
            N.ORDERING_KEY_POSITIONS: positions,
            N.ORDERING_MIDDLE_ITEMS: middle,
        },
        parent=parent,
    ):
        pass
    return ordered
